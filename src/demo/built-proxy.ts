// The demos run the real proxy as users do: the built CLI (`node dist/main.js serve`) as a child
// process, its output inherited. It starts the embedded PostgreSQL unless DATABASE_URL (or
// store.url) names a server, so "ready" is a URL that answers 2xx once the store is migrated.
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';

export interface BuiltProxyOptions {
  readonly configFile: string;
  /** Added to this process's environment. */
  readonly env?: NodeJS.ProcessEnv;
  /** Polled until it answers 2xx: a route through the proxy, or the admin /readyz. */
  readonly readyUrl: string;
  readonly readyTimeoutMs?: number;
}

export interface BuiltProxy {
  readonly child: ChildProcess;
  /** SIGTERM (a graceful drain) and waits for the exit. */
  close(): Promise<void>;
}

const root = path.resolve(__dirname, '..', '..');

export async function startBuiltProxy(options: BuiltProxyOptions): Promise<BuiltProxy> {
  const child = spawn(
    process.execPath,
    [path.join(root, 'dist', 'main.js'), 'serve', '--config', options.configFile],
    {
      cwd: root,
      env: { ...process.env, LOG_LEVEL: 'warn', ...options.env },
      stdio: ['ignore', 'inherit', 'inherit'],
    },
  );
  const close = () => stop(child);
  try {
    await waitForReady(options.readyUrl, child, options.readyTimeoutMs ?? 60_000);
  } catch (error) {
    await close();
    throw error;
  }
  return { child, close };
}

async function waitForReady(url: string, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`the proxy exited with code ${child.exitCode}`);
    const ok = await fetch(url).then(
      async (response) => {
        await response.body?.cancel();
        return response.ok;
      },
      () => false,
    );
    if (ok) return;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`the proxy was not ready within ${timeoutMs / 1000} s`);
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

/** Runs a demo's `main` as the process it is: its result is the exit code, a failure says so. */
export function runDemo(main: () => Promise<number>, what: string): void {
  main().then(
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(`${what} failed: ${String(error)}\n`);
      process.exit(1);
    },
  );
}
