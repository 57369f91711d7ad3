// A data directory and config of their own for tests that run `serve` on the embedded PostgreSQL:
// made before the file's tests, every serve still running stopped after each test, and the server
// left running stopped and everything removed after the last.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runningPostmaster } from '../../src/embedded/embedded-state';
import type { ServeProcess } from './cli-process';
import { until } from './eventually';

export interface EmbeddedFixture {
  readonly workDir: string;
  readonly dataDir: string;
  readonly configFile: string;
  /** Serves a test started: each is stopped after the test. */
  readonly running: ServeProcess[];
}

/**
 * Registers the hooks. `yaml` is called in beforeAll, after the hooks registered before this call
 * (an upstream started there can be named in it).
 */
export function embeddedFixture(name: string, yaml: (dataDir: string) => string): EmbeddedFixture {
  const fixture = { workDir: '', dataDir: '', configFile: '', running: [] as ServeProcess[] };
  beforeAll(() => {
    fixture.workDir = fs.mkdtempSync(path.join(os.tmpdir(), `ip-${name}-`));
    // A temp dir of its own: as root the server's user must be able to reach it.
    fixture.dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `ip-${name}-pg-`));
    fixture.configFile = path.join(fixture.workDir, 'proxy.yaml');
    fs.writeFileSync(fixture.configFile, yaml(fixture.dataDir));
  });
  afterEach(async () => {
    for (const proxy of fixture.running.splice(0)) {
      if (proxy.child.exitCode === null && proxy.child.signalCode === null) proxy.child.kill();
      await proxy.exited();
    }
  });
  afterAll(async () => {
    const left = runningPostmaster(fixture.dataDir);
    if (left) process.kill(left.pid, 'SIGINT');
    await until(() => !runningPostmaster(fixture.dataDir), 'the server to stop').catch(
      () => undefined,
    );
    fs.rmSync(fixture.workDir, { recursive: true, force: true });
    fs.rmSync(fixture.dataDir, { recursive: true, force: true });
  });
  return fixture;
}
