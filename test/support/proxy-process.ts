// Runs the built proxy (dist/main.js, built by the jest global setup) as its own process, as users
// and orchestrators do: for the CLI, several instances on one database, and kill -9.
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findFreePort } from '../../src/embedded/embedded';

export const PROXY_BIN = path.resolve(__dirname, '../../dist/main.js');

export interface ProxyProcess {
  readonly child: ChildProcess;
  readonly url: string;
  readonly port: number;
  /** The admin listener (the YAML must say `admin: { port: "${ADMIN_PORT}" }` to get it). */
  readonly adminUrl: string;
  /** The config file the process serves (rewrite it, then send SIGHUP, to reload). */
  readonly configFile: string;
  output(): string;
  /** Resolves with the exit code (null when killed by a signal). */
  exited(): Promise<number | null>;
  kill(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface ProxyProcessOptions {
  /** YAML; `${PROXY_PORT}` and `${ADMIN_PORT}` are the ports chosen for this process. */
  readonly yaml: string;
  readonly env?: NodeJS.ProcessEnv;
  /** Flags for node itself, before the script. */
  readonly nodeArgs?: readonly string[];
}

export async function startProxyProcess(options: ProxyProcessOptions): Promise<ProxyProcess> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-proc-'));
  const file = path.join(dir, 'proxy.yaml');
  fs.writeFileSync(file, options.yaml);
  const port = await findFreePort();
  const adminPort = await findFreePort();
  const child = spawn(
    process.execPath,
    [...(options.nodeArgs ?? []), PROXY_BIN, 'serve', '--config', file],
    {
      env: {
        ...process.env,
        LOG_LEVEL: 'info',
        ...options.env,
        PROXY_PORT: String(port),
        ADMIN_PORT: String(adminPort),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  void exit.then(() => fs.rmSync(dir, { recursive: true, force: true }));
  await new Promise<void>((resolve, reject) => {
    const onData = (data: Buffer): void => {
      output += data.toString();
      if (output.includes('admin listening')) resolve();
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (data: Buffer) => (output += data.toString()));
    void exit.then((code) => reject(new Error(`proxy exited early (${code}):\n${output}`)));
  });
  return {
    child,
    url: `http://127.0.0.1:${port}`,
    port,
    adminUrl: `http://127.0.0.1:${adminPort}`,
    configFile: file,
    output: () => output,
    exited: () => exit,
    kill: (signal = 'SIGTERM') => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exit;
    },
  };
}
