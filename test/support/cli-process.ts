// The built CLI (dist/main.js) as a person runs it, for tests of processes and signals: one-shot
// commands that exit, and `serve` left running, optionally as the leader of its own process group
// so a test can send SIGINT to the whole group, as a terminal's Ctrl-C does.
import { type ChildProcess, spawn } from 'node:child_process';
import net from 'node:net';
import { PROXY_BIN } from './proxy-process';

export interface CliResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface CliOptions {
  readonly env?: NodeJS.ProcessEnv;
  readonly cwd?: string;
  /** The entry point to run: another checkout's dist/main.js. */
  readonly bin?: string;
  /** Rewrites the argv before it runs (e.g. pg-cluster's serverCommand: as another user). */
  readonly wrap?: (argv: string[]) => string[];
}

export function runCli(args: readonly string[], options: CliOptions = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    const argv = [process.execPath, options.bin ?? PROXY_BIN, ...args];
    const [command, ...rest] = options.wrap ? options.wrap(argv) : argv;
    const child = spawn(command!, rest, {
      env: { ...process.env, ...options.env },
      cwd: options.cwd,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

export interface ServeProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  /** stdout and stderr, interleaved as they arrived. */
  output(): string;
  stderr(): string;
  /** Resolves once `text` appears in the output; rejects if the process exits first. */
  waitFor(text: string | RegExp): Promise<void>;
  /** The exit code (null when killed by a signal). */
  exited(): Promise<number | null>;
}

export interface ServeOptions extends CliOptions {
  /** Lead a process group of its own, like a shell's foreground job (for SIGINT to the group). */
  readonly groupLeader?: boolean;
}

export function spawnServe(args: readonly string[], options: ServeOptions = {}): ServeProcess {
  const child = spawn(process.execPath, [options.bin ?? PROXY_BIN, 'serve', ...args], {
    env: { ...process.env, LOG_FORMAT: 'json', ...options.env },
    cwd: options.cwd,
    detached: options.groupLeader === true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let stderr = '';
  const waiters = new Set<() => void>();
  const append = (text: string): void => {
    output += text;
    for (const check of waiters) check();
  };
  child.stdout!.on('data', (d: Buffer) => append(d.toString()));
  child.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
    append(d.toString());
  });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    pid: child.pid!,
    output: () => output,
    stderr: () => stderr,
    exited: () => exit,
    waitFor: (text) =>
      new Promise<void>((resolve, reject) => {
        const found = (): boolean =>
          typeof text === 'string' ? output.includes(text) : text.test(output);
        const check = (): void => {
          if (!found()) return;
          waiters.delete(check);
          resolve();
        };
        waiters.add(check);
        check();
        void exit.then((code) => {
          if (!found()) reject(new Error(`serve exited (${code}) before "${text}":\n${output}`));
        });
      }),
  };
}

/** `serve` once it listens. */
export async function startServe(
  args: readonly string[],
  options: ServeOptions = {},
): Promise<ServeProcess> {
  const serve = spawnServe(args, options);
  await serve.waitFor('idempotency-proxy listening');
  return serve;
}

/** The JSON log lines of a process's output with the given message prefix. */
export function logLines(output: string, msgStart: string): Record<string, unknown>[] {
  return output
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((line) => String(line.msg).startsWith(msgStart));
}

/** A port held by another listener, for "port in use" startup errors; release it with close(). */
export async function occupiedPort(): Promise<{ port: number; close(): void }> {
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  return { port: (holder.address() as net.AddressInfo).port, close: () => holder.close() };
}
