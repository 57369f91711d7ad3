// A payments upstream that keeps its own ledger, for the reconcile tests (docs/reconcile.md): POST
// makes a refund (one ledger entry per execution, so a second execution of a key shows), GET
// /refunds?idempotency_key=K looks refunds up the way a probe does. A request's `x-mode` header
// picks how its POST misbehaves; `probeMode` how lookups answer.
import { sleep, startUpstream, type TestUpstream } from './upstream';

export interface Refund {
  readonly id: string;
  readonly key: string;
  readonly order: unknown;
  readonly amount: unknown;
}

export type ProbeMode = 'normal' | 'error' | 'html' | 'slow' | 'slow-found';

export interface RefundLedger {
  readonly url: string;
  /** Every refund made, in order: a key twice here ran twice. */
  readonly refunds: Refund[];
  /** Lookups received, with their query. */
  readonly lookups: URLSearchParams[];
  probeMode: ProbeMode;
  /** How long `answer-late` and `record-late` hold the request (longer than the proxy's timeout). */
  lateMs: number;
  executions(key: string): number;
  probes(key: string): number;
  close(): Promise<void>;
}

export async function startRefundLedger(): Promise<RefundLedger> {
  const refunds: Refund[] = [];
  const lookups: URLSearchParams[] = [];
  const ledger = {
    refunds,
    lookups,
    probeMode: 'normal' as ProbeMode,
    lateMs: 3_000,
    executions: (key: string) => refunds.filter((refund) => refund.key === key).length,
    probes: (key: string) => lookups.filter((query) => query.get('idempotency_key') === key).length,
  };
  const record = (key: string, body: Buffer): Refund => {
    const parsed = JSON.parse(body.toString('utf8')) as { order?: unknown; amount?: unknown };
    const refund = {
      id: `re_${refunds.length + 1}`,
      key,
      order: parsed.order,
      amount: parsed.amount,
    };
    refunds.push(refund);
    return refund;
  };
  const upstream: TestUpstream = await startUpstream(async (req, res, raw) => {
    const url = new URL(req.url, 'http://ledger');
    if (req.method === 'GET') {
      lookups.push(url.searchParams);
      const key = url.searchParams.get('idempotency_key');
      const found = refunds.filter((refund) => refund.key === key);
      const mode = ledger.probeMode;
      if (mode === 'error') {
        res.writeHead(500, { 'content-type': 'text/plain' });
        return void res.end('ledger unavailable');
      }
      if (mode === 'html') {
        res.writeHead(200, { 'content-type': 'text/html' });
        return void res.end('<html>maintenance</html>');
      }
      if (mode === 'slow') await sleep(ledger.lateMs);
      if (mode === 'slow-found') await sleep(400);
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end(JSON.stringify(found));
    }
    const key = String(req.headers['idempotency-key'] ?? '');
    const mode = req.headers['x-mode'];
    if (mode === 'drop') {
      // Read and never run: the connection breaks after the send, so the proxy cannot tell.
      raw.socket.destroy();
      return;
    }
    if (mode === 'record-late') await sleep(ledger.lateMs);
    const refund = record(key, req.body);
    if (mode === 'answer-late') await sleep(ledger.lateMs);
    if (res.destroyed) return;
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify(refund));
  });
  return {
    ...ledger,
    get probeMode() {
      return ledger.probeMode;
    },
    set probeMode(mode: ProbeMode) {
      ledger.probeMode = mode;
    },
    get lateMs() {
      return ledger.lateMs;
    },
    set lateMs(ms: number) {
      ledger.lateMs = ms;
    },
    url: upstream.url,
    close: () => upstream.close(),
  };
}
