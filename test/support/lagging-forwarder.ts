// A TCP forwarder to PostgreSQL that delivers late what the server sends on some connections: the
// ones whose startup message names an application_name `lagged` picks (e.g. the completion
// listener's), so their notifications arrive `lagMs` after the other sessions' replies. What a busy
// worker, or a slower path to the database, does to one connection and not to another.
import net from 'node:net';

export interface LaggingForwarder {
  readonly port: number;
  close(): Promise<void>;
}

export async function startLaggingForwarder(
  target: { readonly host: string; readonly port: number },
  lagMs: number,
  lagged: (applicationName: string) => boolean,
): Promise<LaggingForwarder> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => undefined);
    }
    let lag: boolean | undefined;
    client.on('data', (chunk: Buffer) => {
      // The first message is the startup message (no TLS here): its parameters are NUL-separated.
      if (lag === undefined) {
        const parameters = chunk.subarray(8).toString('latin1').split('\0');
        const name = parameters[parameters.indexOf('application_name') + 1] ?? '';
        lag = parameters.includes('application_name') && lagged(name);
      }
      upstream.write(chunk);
    });
    // Timers of one duration fire in the order they were set: the stream stays in order.
    upstream.on('data', (chunk: Buffer) => {
      if (lag) setTimeout(() => client.write(chunk), lagMs);
      else client.write(chunk);
    });
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => setTimeout(() => client.destroy(), lag ? lagMs : 0));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
