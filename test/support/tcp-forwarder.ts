// A TCP forwarder on loopback whose target can be switched: the "database URL's host" of a failover
// test. Connections made after a switch reach the new target; existing ones stay on the old one
// until it drops them (as a DNS or virtual-IP switch behaves).

export interface Bridge {
  readonly port: number | undefined;
  /** Stops relaying on the open connections; what is sent stays buffered until `drop`. */
  hold(): void;
  /** Closes the open connections (the listener stays). */
  drop(): void;
  close(): Promise<void>;
}

/** netns-bridge.js (plain JS, as it also runs as a script inside a namespace), typed. */
// eslint-disable-next-line @typescript-eslint/no-require-imports
export const { startBridge } = require('./netns-bridge.js') as {
  startBridge(listen: string, target: string | (() => string)): Promise<Bridge>;
};

export interface Target {
  readonly host: string;
  readonly port: number;
}

export interface TcpForwarder {
  readonly port: number;
  /** postgres:// URL through the forwarder. */
  readonly url: string;
  switchTo(target: Target): void;
  hold(): void;
  drop(): void;
  close(): Promise<void>;
}

export async function startTcpForwarder(initial: Target): Promise<TcpForwarder> {
  let target = initial;
  const bridge = await startBridge('tcp:127.0.0.1:0', () => `tcp:${target.host}:${target.port}`);
  const port = bridge.port!;
  return {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    switchTo: (next) => {
      target = next;
    },
    hold: () => bridge.hold(),
    drop: () => bridge.drop(),
    close: () => bridge.close(),
  };
}
