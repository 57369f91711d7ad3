// `npm start`, the demos and `npm run cli` build dist/ only when a source is newer than the last
// build: run here on a project of one source file laid out as ours (src/, tsconfig.json, dist/).
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const root = path.resolve(__dirname, '../..');
let project: string;

/** Said before every build: what it costs, so a first start is not ~20 s of silence. */
const TAKES = '- about 20 s on 2 cores; later starts skip it until a source changes';

beforeAll(() => {
  project = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-build-'));
  fs.mkdirSync(path.join(project, 'src'));
  fs.mkdirSync(path.join(project, 'src/launch'));
  // With the Node.js check it runs first (it reads the engines range below).
  for (const file of ['build-if-stale.js', 'node-version.js'])
    fs.copyFileSync(path.join(root, 'src/launch', file), path.join(project, 'src/launch', file));
  fs.symlinkSync(path.join(root, 'node_modules'), path.join(project, 'node_modules'));
  fs.writeFileSync(
    path.join(project, 'package.json'),
    '{"name":"p","private":true,"engines":{"node":"^22.19 || ^24 || ^26"},"scripts":{"build":"tsc -p tsconfig.json"}}\n',
  );
  fs.writeFileSync(
    path.join(project, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: { outDir: 'dist', rootDir: 'src' },
      include: ['src/**/*.ts'],
    }),
  );
  fs.writeFileSync(path.join(project, 'src/main.ts'), 'export const answer = 1;\n');
});

afterAll(() => fs.rmSync(project, { recursive: true, force: true }));

/** What the script said (only that it builds, why, and how long), and whether dist/main.js runs. */
function build(): string {
  const result = spawnSync(process.execPath, ['src/launch/build-if-stale.js'], {
    cwd: project,
    encoding: 'utf8',
  });
  expect(result.status).toBe(0);
  execFileSync(process.execPath, ['dist/main.js'], { cwd: project });
  return result.stderr;
}

test('builds when dist/ is missing, not again while nothing changed, and again after an edit or a new file', () => {
  expect(build()).toBe(`idempotency-proxy: building dist/ (dist/ is not built yet) ${TAKES}\n`);
  expect(build()).toBe('');
  const now = new Date(); // after the last build started: an edit
  fs.utimesSync(path.join(project, 'src/main.ts'), now, now);
  expect(build()).toBe(`idempotency-proxy: building dist/ (src/main.ts changed) ${TAKES}\n`);
  expect(build()).toBe('');
  fs.writeFileSync(path.join(project, 'src/extra.ts'), 'export const more = 2;\n');
  expect(build()).toBe(
    `idempotency-proxy: building dist/ (sources were added or removed) ${TAKES}\n`,
  );
  expect(fs.existsSync(path.join(project, 'dist/extra.js'))).toBe(true);
  expect(build()).toBe('');
});
