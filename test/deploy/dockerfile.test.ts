// Lints the Dockerfile with the hadolint rules that apply to it (hadolint itself is not packaged for
// Debian and there is no Docker engine here), each test citing its rule id, plus the checks that tie
// the image to the project: ports from config/proxy.yaml, the entrypoints the build produces, and a
// build context (.dockerignore) that sends everything the Dockerfile copies and nothing else.
import fs from 'node:fs';
import path from 'node:path';
import { parseConfigText } from '../../src/compiler/load';
import {
  execForm,
  imageEnv,
  inheritedInstructions,
  isIgnored,
  lastOf,
  lineage,
  readDockerfile,
  readDockerignore,
  REPO_ROOT,
  splitFlags,
  stageNamed,
  type Instruction,
  type Stage,
} from './docker-build-inputs';

const dockerfile = readDockerfile();
const { stages, instructions } = dockerfile;
const stageNames = new Set(stages.flatMap((stage) => (stage.name ? [stage.name] : [])));
const proxy = stageNamed(dockerfile, 'proxy');
const payments = stageNamed(dockerfile, 'payments');
const runnable = [proxy, payments];
const runs = instructions.filter((instruction) => instruction.keyword === 'RUN');

const where = (instruction: Instruction) =>
  `Dockerfile:${instruction.line} ${instruction.keyword} ${instruction.args}`;

function ofStage(stage: Stage, keyword: string): Instruction[] {
  return stage.instructions.filter((instruction) => instruction.keyword === keyword);
}

/** What an image copies from the build stage, as `SOURCE DEST`. */
function copiesFromBuild(stage: Stage): string[] {
  return inheritedInstructions(dockerfile, stage)
    .filter((instruction) => instruction.keyword === 'COPY')
    .filter((copy) => splitFlags(copy.args).flags.get('from') === 'build')
    .map((copy) => splitFlags(copy.args).rest);
}

/** The config the image serves by default, resolved with the image's own environment. */
function configForImage(stage: Stage) {
  const file = path.join(REPO_ROOT, 'config/proxy.yaml');
  return parseConfigText(fs.readFileSync(file, 'utf8'), file, imageEnv(dockerfile, stage));
}

/** HEALTHCHECK's command as an argument list (exec form only; undefined for shell form or NONE). */
function healthcheckCommand(stage: Stage): string[] | undefined {
  const healthcheck = lastOf(dockerfile, stage, 'HEALTHCHECK');
  if (!healthcheck) return undefined;
  const { rest } = splitFlags(healthcheck.args);
  const match = /^CMD\s+(.*)$/s.exec(rest);
  return match ? execForm(match[1]!) : undefined;
}

describe('Dockerfile: base images and stages', () => {
  const externalBases = stages.filter((stage) => !stageNames.has(stage.from.toLowerCase()));

  it('DL3006: tags every base image explicitly', () => {
    expect(externalBases.length).toBeGreaterThan(0);
    // The tag follows the last ':' of the last path segment (a registry host may carry a port).
    for (const stage of externalBases) {
      const lastSegment = stage.from.split('/').pop() ?? '';
      expect({
        image: stage.from,
        tagged: /:[\w][\w.-]*$|@sha256:[0-9a-f]{64}$/.test(lastSegment),
      }).toEqual({
        image: stage.from,
        tagged: true,
      });
    }
  });

  it('DL3007: never uses the :latest tag', () => {
    for (const stage of externalBases) expect(stage.from).not.toMatch(/:latest$/);
  });

  it('runs the newest Node line package.json engines name (the Active LTS), on a slim Debian base', () => {
    const { engines } = JSON.parse(
      fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8'),
    ) as {
      engines: { node: string };
    };
    const lines = [...engines.node.matchAll(/\^(\d+)/g)].map((m) => Number(m[1]));
    expect(lines).toEqual([22, 24, 26]);
    for (const stage of externalBases)
      expect(stage.from).toBe(`node:${Math.max(...lines)}-bookworm-slim`);
  });

  it('DL3024: gives every stage a unique name', () => {
    const names = stages.map((stage) => stage.name);
    expect(names.every((name) => name !== undefined)).toBe(true);
    expect(new Set(names).size).toBe(names.length);
  });

  it('DL3022: COPY --from names an earlier stage', () => {
    for (const stage of stages) {
      const earlier = new Set(stages.slice(0, stage.index).map((each) => each.name));
      for (const copy of ofStage(stage, 'COPY')) {
        const from = splitFlags(copy.args).flags.get('from');
        if (from !== undefined)
          expect({ copy: where(copy), earlier: earlier.has(from) }).toEqual({
            copy: where(copy),
            earlier: true,
          });
      }
    }
  });

  it('is multi-stage: a named build stage compiles and packs, and the proxy image takes only the packed package from it', () => {
    const build = stageNamed(dockerfile, 'build');
    const steps = ofStage(build, 'RUN').flatMap((run) => run.args.split(/\s*&&\s*/));
    expect(steps).toContain('npm run build');
    expect(steps).toContain('npm pack --ignore-scripts --pack-destination /tmp');
    // The proxy's package alone: dist/client holds the client's build, so its package is not needed.
    expect(steps.filter((step) => /^npm pack\b/.test(step))).toHaveLength(1);
    expect(steps.filter((step) => /^tar -xzf \/tmp\/.*\.tgz -C \/pkg\b/.test(step))).toHaveLength(
      1,
    );
    expect(copiesFromBuild(proxy)).toEqual(['/pkg ./']);
    expect(lineage(dockerfile, proxy)).not.toContain(build);
  });

  it('adds to the payments image only the demo service, which the package leaves out', () => {
    expect(copiesFromBuild(payments)).toEqual([
      '/pkg ./',
      '/app/dist/demo/payments-service.js ./dist/demo/',
    ]);
  });

  it("gives the build's npm ci every workspace package.json, so it links and builds the client", () => {
    const { workspaces = [] } = JSON.parse(
      fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8'),
    ) as { workspaces?: string[] };
    expect(workspaces.length).toBeGreaterThan(0);
    const copied = ofStage(stageNamed(dockerfile, 'build'), 'COPY').map(
      (copy) => splitFlags(copy.args).rest,
    );
    for (const workspace of workspaces)
      expect(copied).toContain(`${workspace}/package.json ./${workspace}/`);
  });

  it('installs the production dependencies without the workspaces: no link to a client that is not in the image', () => {
    const [install] = ofStage(stageNamed(dockerfile, 'deps'), 'RUN').map((run) => run.args);
    expect(install).toBe('npm ci --omit=dev --omit=optional --ignore-scripts --workspaces=false');
  });

  it('the proxy image listens for client traffic on every interface (PROXY_HOST), as a published port needs', () => {
    expect(configForImage(proxy).listen.host).toBe('0.0.0.0');
  });

  it('builds the proxy by default: the last stage runs node dist/main.js serve --config config/proxy.yaml', () => {
    expect(stageNamed(dockerfile)).toBe(proxy);
    // No heap flags: serve restarts itself with the serving heap sizes (src/heap-tuning.ts).
    expect(execForm(lastOf(dockerfile, proxy, 'ENTRYPOINT')?.args ?? '')).toEqual([
      'node',
      'dist/main.js',
    ]);
    expect(execForm(lastOf(dockerfile, proxy, 'CMD')?.args ?? '')).toEqual([
      'serve',
      '--config',
      'config/proxy.yaml',
    ]);
    expect(fs.existsSync(path.join(REPO_ROOT, 'config/proxy.yaml'))).toBe(true);
  });

  it('starts the proxy with the node flags of `npm start`, so the image serves as the bench measured', () => {
    const { scripts } = JSON.parse(
      fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8'),
    ) as { scripts: Record<string, string> };
    const start = scripts.start!.split(' ');
    const entrypoint = execForm(lastOf(dockerfile, proxy, 'ENTRYPOINT')?.args ?? '') ?? [];
    expect(start.slice(0, start.indexOf('dist/main.js') + 1)).toEqual(entrypoint);
    expect(start.slice(start.indexOf('dist/main.js') + 1)).toEqual(['serve']);
  });

  it('runs entrypoints that the build compiles from src/', () => {
    for (const stage of runnable) {
      const args = execForm(lastOf(dockerfile, stage, 'ENTRYPOINT')?.args ?? '') ?? [];
      const script = args.find((arg) => !arg.startsWith('-') && arg !== 'node') ?? '';
      expect(script).toMatch(/^dist\/.+\.js$/);
      const source = script.replace(/^dist\//, 'src/').replace(/\.js$/, '.ts');
      expect(fs.existsSync(path.join(REPO_ROOT, source))).toBe(true);
    }
  });
});

describe('Dockerfile: instructions', () => {
  it('DL3002: the runnable images (proxy, payments) end as a non-root user', () => {
    for (const stage of runnable) {
      const user = lastOf(dockerfile, stage, 'USER')?.args.split(':')[0];
      expect({ stage: stage.name, user }).toEqual({ stage: stage.name, user: 'node' });
    }
  });

  it('DL3025: CMD and ENTRYPOINT use the JSON (exec) form, so SIGTERM reaches node', () => {
    const commands = instructions.filter((i) => ['CMD', 'ENTRYPOINT'].includes(i.keyword));
    expect(commands.length).toBeGreaterThan(0);
    for (const command of commands)
      expect({ command: where(command), exec: execForm(command.args) !== undefined }).toEqual({
        command: where(command),
        exec: true,
      });
  });

  it('DL4003, DL4004, DL3012: at most one CMD, ENTRYPOINT and HEALTHCHECK per stage', () => {
    for (const stage of stages)
      for (const keyword of ['CMD', 'ENTRYPOINT', 'HEALTHCHECK'])
        expect(ofStage(stage, keyword).slice(1).map(where)).toEqual([]);
  });

  it('DL3020: copies files with COPY, never ADD', () => {
    expect(instructions.filter((instruction) => instruction.keyword === 'ADD')).toEqual([]);
  });

  it('DL3000: WORKDIR paths are absolute', () => {
    const workdirs = instructions.filter((instruction) => instruction.keyword === 'WORKDIR');
    expect(workdirs.length).toBeGreaterThan(0);
    for (const workdir of workdirs) expect(workdir.args).toMatch(/^\//);
  });

  it('DL3045: a COPY to a relative destination comes after a WORKDIR', () => {
    for (const stage of stages) {
      const seen: Instruction[] = [];
      for (const instruction of inheritedInstructions(dockerfile, stage)) {
        if (instruction.keyword === 'COPY' && !/\s\/\S*$/.test(instruction.args))
          expect({ copy: where(instruction), workdir: seen.length > 0 }).toEqual({
            copy: where(instruction),
            workdir: true,
          });
        if (instruction.keyword === 'WORKDIR') seen.push(instruction);
      }
    }
  });

  it('DL3021: a COPY with several sources copies into a folder ending in /', () => {
    for (const copy of instructions.filter((instruction) => instruction.keyword === 'COPY')) {
      const parts = splitFlags(copy.args).rest.split(/\s+/);
      if (parts.length > 2) expect(parts[parts.length - 1]).toMatch(/\/$/);
    }
  });

  it('DL3003, DL3004: RUN neither changes folder with cd nor uses sudo', () => {
    for (const run of runs) {
      expect(run.args).not.toMatch(/(^|[;&|]\s*)cd\s/);
      expect(run.args).not.toMatch(/\bsudo\b/);
    }
  });

  it('DL3059: no two consecutive RUN instructions (they would be one layer)', () => {
    for (const stage of stages)
      stage.instructions.forEach((instruction, i) => {
        if (instruction.keyword === 'RUN')
          expect(stage.instructions[i + 1]?.keyword).not.toBe('RUN');
      });
  });

  it('DL4006: a RUN with a pipe is preceded by SHELL with -o pipefail', () => {
    for (const stage of stages) {
      let pipefail = false;
      for (const instruction of inheritedInstructions(dockerfile, stage)) {
        if (instruction.keyword === 'SHELL') pipefail = instruction.args.includes('pipefail');
        if (instruction.keyword === 'RUN' && /[^|]\|[^|]/.test(instruction.args))
          expect({ run: where(instruction), pipefail }).toEqual({
            run: where(instruction),
            pipefail: true,
          });
      }
    }
  });

  it('DL3008, DL3009, DL3015: any apt-get install pins versions, skips recommends and removes the lists', () => {
    for (const run of runs.filter((each) => /apt-get\s+(-\S+\s+)*install/.test(each.args))) {
      expect(run.args).toMatch(/--no-install-recommends/);
      expect(run.args).toMatch(/rm -rf \/var\/lib\/apt\/lists\/\*/);
      const packages = run.args
        .replace(/.*apt-get\s+(?:-\S+\s+)*install\s+/, '')
        .split(/&&|;/)[0]!
        .split(/\s+/)
        .filter((word) => word !== '' && !word.startsWith('-'));
      for (const name of packages) expect(name).toMatch(/=/);
    }
  });

  it('DL3016 (pinned npm packages): installs from the lockfile with npm ci, never npm install', () => {
    const npm = runs.filter((run) => /\bnpm\s/.test(run.args));
    expect(npm.some((run) => /\bnpm ci\b/.test(run.args))).toBe(true);
    for (const run of npm) expect(run.args).not.toMatch(/\bnpm (install|i|add)\b/);
  });

  it('DL3042, for npm: no npm cache lands in a runnable image: npm installs only in builder stages', () => {
    for (const stage of runnable) {
      const installs = inheritedInstructions(dockerfile, stage).filter(
        (instruction) =>
          instruction.keyword === 'RUN' && /\bnpm\s+(ci|install)\b/.test(instruction.args),
      );
      expect(installs.map(where)).toEqual([]);
    }
  });

  it('sets NODE_ENV=production in the runnable images', () => {
    for (const stage of runnable) expect(imageEnv(dockerfile, stage).NODE_ENV).toBe('production');
  });
});

describe('Dockerfile agrees with config/proxy.yaml', () => {
  it("EXPOSEs exactly config's listen.port and admin.port", () => {
    const config = configForImage(proxy);
    const exposed = ofStage(proxy, 'EXPOSE')
      .flatMap((expose) => expose.args.split(/\s+/))
      .map((port) => Number(port.replace(/\/tcp$/, '')));
    expect(exposed.sort()).toEqual([config.listen.port, config.admin.port].sort());
  });

  it('DL3057: has a HEALTHCHECK that asks GET /readyz on admin.port with node (no curl in slim images)', () => {
    const command = healthcheckCommand(proxy);
    expect(command?.slice(0, 2)).toEqual(['node', '-e']);
    expect(command?.[2]).toContain(
      `fetch('http://127.0.0.1:${configForImage(proxy).admin.port}/readyz')`,
    );
    expect(command?.[2]).toMatch(/process\.exit\(r\.ok\s*\?\s*0\s*:\s*1\)/);
  });

  it('the payments image listens on every interface, at the port its EXPOSE and healthcheck use', () => {
    const env = imageEnv(dockerfile, payments);
    expect(env.PAYMENTS_HOST).toBe('0.0.0.0');
    expect(ofStage(payments, 'EXPOSE').map((expose) => expose.args)).toEqual([env.PAYMENTS_PORT]);
    expect(healthcheckCommand(payments)?.[2]).toContain(
      `fetch('http://127.0.0.1:${env.PAYMENTS_PORT}/health')`,
    );
  });
});

describe('.dockerignore and the build context', () => {
  const rules = readDockerignore();
  const contextSources = instructions
    .filter((instruction) => instruction.keyword === 'COPY')
    .filter((copy) => !splitFlags(copy.args).flags.has('from'))
    .flatMap((copy) => splitFlags(copy.args).rest.split(/\s+/).slice(0, -1));

  it('sends every file the Dockerfile copies from the context', () => {
    expect(contextSources.length).toBeGreaterThan(0);
    for (const source of contextSources) {
      expect({ source, exists: fs.existsSync(path.join(REPO_ROOT, source)) }).toEqual({
        source,
        exists: true,
      });
      expect({ source, ignored: isIgnored(rules, source) }).toEqual({ source, ignored: false });
    }
    expect(isIgnored(rules, 'src/main.ts')).toBe(false);
    expect(isIgnored(rules, 'config/proxy.yaml')).toBe(false);
    expect(isIgnored(rules, 'packages/client/src/index.ts')).toBe(false);
  });

  it('keeps node_modules, dist, .data, .git, coverage, tests and .env files out of the context', () => {
    for (const kept of [
      'node_modules/pg/package.json',
      'dist/main.js',
      'packages/client/dist/cjs/index.js',
      'packages/client/README.md',
      'packages/client/node_modules/.package-lock.json',
      '.data/postgres/PG_VERSION',
      '.git/HEAD',
      'coverage/lcov.info',
      'test/deploy/dockerfile.test.ts',
      '.env',
      'src/debug.log',
    ])
      expect({ path: kept, ignored: isIgnored(rules, kept) }).toEqual({
        path: kept,
        ignored: true,
      });
  });
});
