// A way to PostgreSQL that a test can cut: every connection through a forwarder on loopback, which
// drops the open ones and refuses new ones while cut (what an instance sees when its network to
// the database goes, or the server stops), and lets them through again when restored.
import { URL } from 'node:url';
import { findFreePort } from '../../src/embedded/embedded';
import { databaseUrl } from './proxy';
import { startTcpForwarder } from './tcp-forwarder';

export interface CuttableDatabase {
  /** The server's URL, through the forwarder. */
  readonly url: string;
  cut(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function cuttableDatabase(server = databaseUrl()): Promise<CuttableDatabase> {
  const target = new URL(server);
  const real = { host: target.hostname, port: Number(target.port || 5432) };
  const forwarder = await startTcpForwarder(real);
  const nowhere = { host: '127.0.0.1', port: await findFreePort() };
  const via = new URL(server);
  via.hostname = '127.0.0.1';
  via.port = String(forwarder.port);
  return {
    url: via.toString(),
    cut: () => {
      forwarder.switchTo(nowhere);
      forwarder.drop();
    },
    restore: () => forwarder.switchTo(real),
    close: () => forwarder.close(),
  };
}
