// What every helper server of the bench (upstream, bare forwarders) does around its handler: listen on
// BENCH_PORT (0 = any free port), report {type:'ready', port} to the orchestrator over IPC, and close
// on SIGTERM, SIGINT or the orchestrator going away.
import type http from 'node:http';
import type { AddressInfo } from 'node:net';

export function serveHelper(server: http.Server): void {
  server.listen(Number(process.env.BENCH_PORT ?? 0), '127.0.0.1', () => {
    process.send?.({ type: 'ready', port: (server.address() as AddressInfo).port });
  });
  // Says why on stderr: the orchestrator prints a helper's last lines when it exits unasked.
  const stop = (why: string): void => {
    process.stderr.write(`stopping: ${why}\n`);
    server.closeAllConnections();
    server.close(() => process.exit(0));
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('disconnect', () => stop('the orchestrator went away (IPC disconnect)'));
}
