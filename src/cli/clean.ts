// `idempotency-proxy clean`: removes the embedded PostgreSQL's data directory — where it really is,
// which as root may be the state dir rather than the configured store.dataDir. It stops nothing: a
// proxy or operator command using the directory, or a server still running on it, is a refusal
// that says what to stop. The removal happens under the owner claim, so a proxy starting meanwhile
// waits or is refused instead of finding half a directory.
import fs from 'node:fs';
import path from 'node:path';
import type { ProxyConfig } from '../config/types';
import { embeddedDataDir } from '../embedded/data-dir-placement';
import { claimOwner, releaseOwner, runningPostmaster } from '../embedded/embedded-state';
import type { CliArgs } from './args';

export function runClean(config: ProxyConfig, args: CliArgs): number {
  const dataDir = embeddedDataDir(config.store.dataDir);
  const say = (line: string): void => void process.stdout.write(`${line}\n`);
  const refuse = (line: string): number => {
    process.stderr.write(`idempotency-proxy: ${line}\n`);
    return 1;
  };
  if (!fs.existsSync(dataDir)) {
    say(`nothing to remove: there is no embedded PostgreSQL data directory at ${dataDir}`);
    return 0;
  }
  if (!fs.existsSync(path.join(dataDir, 'PG_VERSION')) && fs.readdirSync(dataDir).length > 0)
    return refuse(
      `${dataDir} is not an embedded PostgreSQL data directory (no PG_VERSION): not removing it; check store.dataDir`,
    );
  const owner = claimOwner(dataDir, { command: 'idempotency-proxy clean', shortLived: true });
  if (owner)
    return refuse(
      `the embedded PostgreSQL in ${dataDir} is in use by PID ${owner.pid} (${owner.command}): stop it first (kill ${owner.pid}), then run clean again`,
    );
  try {
    const server = runningPostmaster(dataDir);
    if (server)
      return refuse(
        `a PostgreSQL server (PID ${server.pid}, port ${server.port}) still runs on ${dataDir}, left by a proxy that is gone: stop it (kill -INT ${server.pid}), then run clean again`,
      );
    if (!args.yes) {
      say(
        `would remove ${dataDir}: the embedded PostgreSQL's data, every stored key with it. Run idempotency-proxy clean --yes to remove it`,
      );
      return 1;
    }
    fs.rmSync(dataDir, { recursive: true, force: true });
    say(`removed ${dataDir}; the next serve initialises a new one`);
    return 0;
  } finally {
    releaseOwner(dataDir);
  }
}
