// Controls a PostgreSQL server of a test's own (see pg-server-child.js), so the test can stop it and
// start it again while the proxy keeps running.
import { type ChildProcess, fork } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findFreePort } from '../../src/embedded/embedded';

export interface DisposablePostgres {
  /** Known once started: the password is made at the first start. */
  readonly url: string;
  start(): Promise<void>;
  stop(): Promise<void>;
  dispose(): Promise<void>;
}

export async function createDisposablePostgres(): Promise<DisposablePostgres> {
  // The temp dir is the data dir itself: as root the server's user must reach it, and /tmp is open.
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-disposable-'));
  const port = await findFreePort();
  const child: ChildProcess = fork(path.join(__dirname, 'pg-server-child.js'), [], {
    env: { ...process.env, PG_DATA_DIR: dataDir, PG_PORT: String(port) },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const call = (cmd: string): Promise<{ url?: string }> =>
    new Promise((resolve, reject) => {
      child.once('message', (reply: { ok: boolean; url?: string; error?: string }) =>
        reply.ok ? resolve(reply) : reject(new Error(reply.error)),
      );
      child.send({ cmd });
    });
  let url: string | undefined;
  return {
    get url() {
      if (url === undefined) throw new Error('the disposable PostgreSQL was never started');
      return url;
    },
    start: async () => {
      url = (await call('start')).url;
    },
    stop: async () => {
      await call('stop');
    },
    dispose: async () => {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.disconnect();
      await exited;
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
