// Reading an embedded data directory's lock file at the wrong moment: PostgreSQL creates
// postmaster.pid and writes it a moment later, so a reader can find it empty. An empty PID is 0, and
// kill(0, 0) succeeds (it signals our own process group): that must not read as a running server.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { isRunning, runningPostmaster } from '../../src/embedded/embedded-state';

let dataDir: string;
beforeEach(() => {
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-embedded-state-'));
});
afterEach(() => fs.rmSync(dataDir, { recursive: true, force: true }));

test.each([0, -1, Number(''), Number.NaN, 1.5])('PID %p is never a running process', (pid) => {
  expect(isRunning(pid, 'postgres')).toBe(false);
  expect(isRunning(pid, 'node')).toBe(false);
});

test('this process is running, under its own command and not under another', () => {
  expect(isRunning(process.pid, 'node')).toBe(true);
  expect(isRunning(process.pid, 'postgres')).toBe(false);
});

test('an empty lock file is no server; one naming a live process that is not postgres is none either', () => {
  const lockFile = path.join(dataDir, 'postmaster.pid');
  fs.writeFileSync(lockFile, '');
  expect(runningPostmaster(dataDir)).toBeUndefined();
  fs.writeFileSync(lockFile, `${process.pid}\n${dataDir}\n0\n5432\n`);
  expect(runningPostmaster(dataDir)).toBeUndefined();
});
