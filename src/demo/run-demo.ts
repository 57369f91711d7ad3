// `npm run demo`: starts the demo payments service and the real proxy (the built CLI, serving
// config/proxy.yaml on the embedded PostgreSQL unless DATABASE_URL is set), then tells the refund story.
import path from 'node:path';
import { findFreePort } from '../embedded/embedded';
import { startBuiltProxy } from './built-proxy';
import { startPaymentsService } from './payments-service';
import fs from 'node:fs';
import { tellRefundStory } from './refund-story';
import { tellReconcileStory, writeReconcileConfig } from './reconcile-story';

const root = path.resolve(__dirname, '..', '..');

async function main(): Promise<number> {
  const payments = await startPaymentsService({ port: await findFreePort() });
  const proxyPort = await findFreePort();
  process.stdout.write(
    `Demo payments service on ${payments.url}; starting idempotency-proxy on port ${proxyPort}…\n\n`,
  );
  // config/proxy.yaml, and one route more for the second act (reconcile-story.ts).
  const configFile = writeReconcileConfig(path.join(root, 'config', 'proxy.yaml'));
  const proxy = await startBuiltProxy({
    configFile,
    env: {
      PROXY_HOST: '127.0.0.1',
      PROXY_PORT: String(proxyPort),
      ADMIN_PORT: String(await findFreePort()),
      PAYMENTS_URL: payments.url,
      IDEMPOTENCY_PROXY_DATA_DIR: process.env.IDEMPOTENCY_PROXY_DATA_DIR ?? '.data/demo-postgres',
    },
    readyUrl: `http://127.0.0.1:${proxyPort}/refunds`,
  }).catch(async (error: unknown) => {
    await payments.close();
    throw error;
  });
  try {
    const result = await tellRefundStory({
      proxyUrl: `http://127.0.0.1:${proxyPort}`,
      paymentsUrl: payments.url,
      clientTimeoutMs: 500,
      serviceDelayMs: 1_500,
      print: (line) => process.stdout.write(`${line}\n`),
    });
    const ok = result.refundsThroughProxy === 1;
    process.stdout.write(
      `\n${ok ? 'The proxy turned' : 'UNEXPECTED: the proxy turned'} ${result.attempts.length} attempts into ${result.refundsThroughProxy} refund; without it, ${result.refundsWithoutProxy}.\n\n`,
    );
    process.stdout.write('When the service times out after refunding (idempotency.reconcile):\n');
    const reconciled = await tellReconcileStory({
      proxyUrl: `http://127.0.0.1:${proxyPort}`,
      paymentsUrl: payments.url,
      print: (line) => process.stdout.write(`${line}\n`),
    });
    const real = reconciled.refundsForKey === 1 && reconciled.finalOutcome === 'reconciled';
    return ok && real ? 0 : 1;
  } finally {
    await proxy.close();
    await payments.close();
    fs.rmSync(path.dirname(configFile), { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`demo failed: ${String(error)}\n`);
    process.exit(1);
  },
);
