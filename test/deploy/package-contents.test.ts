// What `npm publish` would upload, read from `npm pack --dry-run --json`: the files the packages'
// `bin`, `main`, `types` and `exports` name are in, and no tests, demos, benchmarks or sources are.
import fs from 'node:fs';
import path from 'node:path';
import { CLIENT_DIR, pack, REPO_ROOT, type Packed } from '../support/npm-pack';

interface Manifest {
  readonly bin?: Record<string, string>;
  readonly main?: string;
  readonly types?: string;
  readonly exports?: unknown;
  readonly dependencies?: Record<string, string>;
  readonly private?: boolean;
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

/**
 * The bin: plain JavaScript that, in a clone, builds dist/ first when it is stale, and in an installed
 * package runs dist/main.js as it is; the one file under src/ that ships.
 */
const LAUNCHER = 'src/launch/idempotency-proxy.js';

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

  it('leaves out sources (but the launcher), tests, demos, benchmarks and the repo-only generators', () => {
    const unwanted = files.filter(
      (file) =>
        (/^(src|test|packages|\.ci|\.config)\//.test(file) && file !== LAUNCHER) ||
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

  it('depends on the client package at the version the workspace holds', () => {
    const client = manifest(CLIENT_DIR) as Manifest & { version: string };
    expect(pkg.dependencies?.['idempotency-proxy-client']).toBe(client.version);
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
    expect(files.filter((file) => !/^dist\/|^(README\.md|package\.json)$/.test(file))).toEqual([]);
  });
});
