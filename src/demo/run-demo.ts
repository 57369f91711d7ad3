// `npm run demo`: starts the demo payments service and the real proxy (the built CLI, serving
// config/proxy.yaml on the embedded PostgreSQL unless DATABASE_URL is set), then tells the refund story.
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { request } from 'undici';
import { findFreePort } from '../db/embedded';
import { startPaymentsService } from './payments-service';
import { tellRefundStory } from './refund-story';

const root = path.resolve(__dirname, '..', '..');

async function main(): Promise<number> {
  const payments = await startPaymentsService({ port: await findFreePort() });
  const proxyPort = await findFreePort();
  const proxy = spawn(
    process.execPath,
    [
      path.join(root, 'dist', 'main.js'),
      'serve',
      '--config',
      path.join(root, 'config', 'proxy.yaml'),
    ],
    {
      cwd: root,
      env: {
        ...process.env,
        PROXY_HOST: '127.0.0.1',
        PROXY_PORT: String(proxyPort),
        ADMIN_PORT: String(await findFreePort()),
        PAYMENTS_URL: payments.url,
        IDEMPOTENCY_PROXY_DATA_DIR: process.env.IDEMPOTENCY_PROXY_DATA_DIR ?? '.data/demo-postgres',
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'inherit', 'inherit'],
    },
  );
  try {
    process.stdout.write(
      `Demo payments service on ${payments.url}; starting idempotency-proxy on port ${proxyPort}…\n\n`,
    );
    await waitForProxy(`http://127.0.0.1:${proxyPort}`, proxy);
    const result = await tellRefundStory({
      proxyUrl: `http://127.0.0.1:${proxyPort}`,
      paymentsUrl: payments.url,
      clientTimeoutMs: 500,
      serviceDelayMs: 1_500,
      print: (line) => process.stdout.write(`${line}\n`),
    });
    const ok = result.refundsThroughProxy === 1;
    process.stdout.write(
      `\n${ok ? 'The proxy turned' : 'UNEXPECTED: the proxy turned'} ${result.attempts.length} attempts into ${result.refundsThroughProxy} refund; without it, ${result.refundsWithoutProxy}.\n`,
    );
    return ok ? 0 : 1;
  } finally {
    await stop(proxy);
    await payments.close();
  }
}

async function waitForProxy(url: string, proxy: ChildProcess): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (proxy.exitCode !== null) throw new Error(`the proxy exited with code ${proxy.exitCode}`);
    try {
      const response = await request(`${url}/refunds`);
      await response.body.dump();
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
  throw new Error('the proxy did not start within 60 s');
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`demo failed: ${String(error)}\n`);
    process.exit(1);
  },
);
