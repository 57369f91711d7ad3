// What `npm publish` would upload, read from `npm pack --dry-run --json`: the files the packages'
// `bin`, `main`, `types` and `exports` name are in, and no tests, demos, benchmarks or sources are.
import fs from 'node:fs';
import path from 'node:path';
import { isAbsoluteLink, linkTargets } from '../support/markdown-links';
import { CLIENT_DIR, pack, REPO_ROOT, type Packed } from '../support/npm-pack';

interface Manifest {
  readonly bin?: Record<string, string>;
  readonly main?: string;
  readonly types?: string;
  readonly exports?: unknown;
  readonly dependencies?: Record<string, string>;
  readonly bundleDependencies?: unknown;
  readonly bundledDependencies?: unknown;
  readonly private?: boolean;
  readonly license?: string;
  readonly homepage?: string;
  readonly repository?: unknown;
  readonly scripts?: Record<string, string>;
}

const manifest = (dir: string) =>
  JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as Manifest;

/** Every file path an `exports` map points at, through nested conditions. */
function exportTargets(exports: unknown): string[] {
  if (typeof exports === 'string') return [exports];
  if (exports === null || typeof exports !== 'object') return [];
  return Object.values(exports).flatMap(exportTargets);
}

/** The files a manifest names, as `npm pack` lists them (no leading ./). */
function namedFiles(pkg: Manifest): string[] {
  return [...Object.values(pkg.bin ?? {}), pkg.main, pkg.types, ...exportTargets(pkg.exports)]
    .filter((file): file is string => file !== undefined)
    .map((file) => path.posix.normalize(file));
}

/** Links of the packed READMEs that leave the package: a file it does not hold, as `README -> target`. */
function linksOutOfPackage(dir: string, files: readonly string[]): string[] {
  const held = new Set(files);
  return files
    .filter((file) => path.posix.basename(file) === 'README.md')
    .flatMap((readme) =>
      linkTargets(fs.readFileSync(path.join(dir, readme), 'utf8'))
        .filter((target) => !isAbsoluteLink(target) && !target.startsWith('#'))
        .map((target) =>
          path.posix.normalize(path.posix.join(path.posix.dirname(readme), target.split('#')[0]!)),
        )
        .filter((target) => !held.has(target))
        .map((target) => `${readme} -> ${target}`),
    );
}

/**
 * The project has no public address yet: a manifest names none rather than a placeholder, and
 * nothing stands between it and `npm publish` on that account.
 */
function expectNoAddress(pkg: Manifest): void {
  expect(pkg.homepage).toBeUndefined();
  expect(pkg.repository).toBeUndefined();
  expect(pkg.scripts?.prepublishOnly).toBeUndefined();
}

/**
 * The bin: plain JavaScript that, in a clone, builds dist/ first when it is stale, and in an installed
 * package runs dist/main.js as it is; with the Node.js check it runs first, the files under src/
 * that ship.
 */
const LAUNCHER = 'src/launch/idempotency-proxy.js';
const NODE_CHECK = 'src/launch/node-version.js';

describe('the idempotency-proxy package', () => {
  const pkg = manifest(REPO_ROOT);
  let packed: Packed;
  let files: string[];

  beforeAll(async () => {
    packed = await pack(REPO_ROOT);
    files = packed.files.map((file) => file.path);
  });

  it('is publishable', () => {
    expect(pkg.private).toBeUndefined();
    expect(packed.name).toBe('idempotency-proxy');
  });

  it('holds every file its bin, main, types and exports name', () => {
    expect(pkg.bin).toEqual({ 'idempotency-proxy': LAUNCHER });
    // The launcher requires the Node.js check before anything else.
    expect(files).toContain(NODE_CHECK);
    for (const file of namedFiles(pkg))
      expect({ file, packed: files.includes(file) }).toEqual({
        file,
        packed: true,
      });
  });

  it('starts the bin with a node shebang (npm makes it executable when it installs it)', () => {
    expect(fs.readFileSync(path.join(REPO_ROOT, LAUNCHER), 'utf8')).toMatch(
      /^#!\/usr\/bin\/env node\n/,
    );
  });

  it('leaves out sources (but the launcher and the READMEs), tests, demos, benchmarks and the repo-only generators', () => {
    const unwanted = files.filter(
      (file) =>
        (/^(src|test|packages|\.ci|\.config)\//.test(file) &&
          file !== LAUNCHER &&
          file !== NODE_CHECK &&
          !file.endsWith('/README.md')) ||
        /^dist\/(demo|bench|soak)\//.test(file) ||
        /^dist\/config\/write-/.test(file) ||
        /(\.test|\.spec)\.(js|d\.ts|js\.map)$/.test(file) ||
        (file.endsWith('.ts') && !file.endsWith('.d.ts')),
    );
    expect(unwanted).toEqual([]);
  });

  it('ships a source map only beside the compiled file it maps', () => {
    const orphans = files
      .filter((file) => file.endsWith('.js.map'))
      .filter((map) => !files.includes(map.replace(/\.map$/, '')));
    expect(orphans).toEqual([]);
  });

  it('ships the example config, its JSON schema, the settings reference and the changelog', () => {
    expect(files).toEqual(
      expect.arrayContaining([
        'config/proxy.yaml',
        'config/proxy.schema.json',
        'config/README.md',
        'README.md',
        'CHANGELOG.md',
        'package.json',
      ]),
    );
  });

  it('depends on nothing the registry lacks: the client workspace is a dev dependency only', () => {
    expect(Object.keys(pkg.dependencies ?? {})).not.toContain('idempotency-proxy-client');
    expect(pkg.bundleDependencies ?? pkg.bundledDependencies).toBeUndefined();
  });

  it('holds the client build as idempotency-proxy/client: every module of the client package', async () => {
    const client = (await pack(CLIENT_DIR)).files
      .map((file) => file.path)
      .filter((file) => /^dist\/cjs\/[^/]+\.(js|d\.ts)$/.test(file))
      .map((file) => file.replace(/^dist\/cjs\//, 'dist/client/'));
    expect(client).toContain('dist/client/index.js');
    expect(files.filter((file) => file.startsWith('dist/client/')).sort()).toEqual(client.sort());
    // The same bytes as the client's CommonJS build: a copy, not a re-export of another package.
    for (const file of client)
      expect(fs.readFileSync(path.join(REPO_ROOT, file), 'utf8')).toBe(
        fs.readFileSync(
          path.join(CLIENT_DIR, file.replace(/^dist\/client\//, 'dist/cjs/')),
          'utf8',
        ),
      );
  });

  it('links from its READMEs only to files it holds: the pages they point to ship with it', () => {
    expect(files).toEqual(expect.arrayContaining(['docs/operations.md', 'src/http/README.md']));
    expect(linksOutOfPackage(REPO_ROOT, files)).toEqual([]);
  });

  it('names no homepage or repository while the project has no public address', () => {
    expectNoAddress(pkg);
  });

  it('ships the licence its package.json names, in full', () => {
    expect(pkg.license).toBe('Apache-2.0');
    expect(files).toContain('LICENSE');
    const text = fs.readFileSync(path.join(REPO_ROOT, 'LICENSE'), 'utf8');
    expect(text).toContain('Apache License\n                           Version 2.0, January 2004');
    expect(text).toContain('END OF TERMS AND CONDITIONS');
  });
});

describe('the idempotency-proxy-client package', () => {
  const pkg = manifest(CLIENT_DIR);
  let files: string[];

  beforeAll(async () => {
    files = (await pack(CLIENT_DIR)).files.map((file) => file.path);
  });

  it('has no dependencies', () => {
    expect(pkg.dependencies ?? {}).toEqual({});
  });

  it('holds every file its main, types and exports name, and marks the ESM build as modules', () => {
    for (const file of namedFiles(pkg))
      expect({ file, packed: files.includes(file) }).toEqual({
        file,
        packed: true,
      });
    expect(files).toContain('dist/esm/package.json');
    expect(files).toContain('README.md');
  });

  it('leaves out the sources and the build configs', () => {
    expect(
      files.filter((file) => !/^dist\/|^(README\.md|LICENSE|package\.json)$/.test(file)),
    ).toEqual([]);
  });

  it('ships the licence its package.json names', () => {
    expect(files).toContain('LICENSE');
  });

  it('links from its README only to files it holds', () => {
    expect(linksOutOfPackage(CLIENT_DIR, files)).toEqual([]);
  });

  it('names no homepage or repository, like the proxy', () => {
    expectNoAddress(pkg);
  });
});
