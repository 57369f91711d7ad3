// A TCP relay to PostgreSQL that can lose one statement on its way: once a message from the client
// carries a marker (a key, a statement name), the connection is cut either before PostgreSQL sees it
// (`before`: nothing ran) or once PostgreSQL has finished it (`after`: it committed, ReadyForQuery
// was sent) and before the client gets any of the reply. The lost reply of a statement that
// committed, which a server restart produces only by chance, on demand.
import net from 'node:net';

export type CutMode = 'before' | 'after';

export interface ReplyCutter {
  /** postgres:// URL through the relay (the target URL's user, password and database). */
  readonly url: string;
  /** Cuts the next connection whose client sends `marker`, in `mode`. One cut per call. */
  cutOn(marker: string, mode: CutMode): Promise<void>;
  /** Forgets a cut armed and not yet made (its promise never settles). */
  disarm(): void;
  close(): Promise<void>;
}

const READY_FOR_QUERY = 0x5a; // 'Z'

export async function startReplyCutter(targetUrl: string): Promise<ReplyCutter> {
  const target = new URL(targetUrl);
  const sockets = new Set<net.Socket>();
  let armed: { marker: string; mode: CutMode; done: () => void } | undefined;

  const server = net.createServer((client) => {
    const upstream = net.connect({ host: target.hostname, port: Number(target.port || 5432) });
    sockets.add(client).add(upstream);
    const drop = (): void => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    /** Set once this connection's reply is being withheld: the server's bytes, not yet parsed. */
    let withheld: Buffer | undefined;
    let cut: (() => void) | undefined;

    client.on('data', (chunk: Buffer) => {
      const cutting = armed;
      if (cutting && withheld === undefined && chunk.includes(cutting.marker)) {
        armed = undefined;
        if (cutting.mode === 'before') {
          drop();
          cutting.done();
          return;
        }
        withheld = Buffer.alloc(0);
        cut = () => {
          drop();
          cutting.done();
        };
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => {
      if (withheld === undefined) {
        client.write(chunk);
        return;
      }
      // Walk the reply's messages (a type byte, then an int32 length that counts itself) until
      // ReadyForQuery: the statement has committed, and the client has none of its reply.
      withheld = Buffer.concat([withheld, chunk]);
      while (withheld.length >= 5) {
        const length = withheld.readInt32BE(1);
        if (withheld.length < 1 + length) break;
        if (withheld[0] === READY_FOR_QUERY) {
          cut?.();
          return;
        }
        withheld = withheld.subarray(1 + length);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  const url = new URL(targetUrl);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return {
    url: url.toString(),
    cutOn: (marker, mode) =>
      new Promise<void>((resolve) => {
        armed = { marker, mode, done: resolve };
      }),
    disarm: () => {
      armed = undefined;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
