// A lease shorter than the upstream call it protects lets a repeat take over (or settle as unknown)
// while the first request is still running. Not an error — a deliberate short lease can make sense with
// an upstream that dedupes on the forwarded key — but worth a loud line at startup and in `check`.
import { formatDuration } from '../config/units';
import type { ProxyConfig } from '../config/types';

/** undici enforces upstream timeouts with about one second of granularity. */
const TIMER_SLACK_MS = 1_000;

export interface LeaseWarning {
  readonly route: string;
  readonly message: string;
}

export function leaseWarnings(config: ProxyConfig): LeaseWarning[] {
  const warnings: LeaseWarning[] = [];
  for (const route of config.routes) {
    const policy = route.idempotency;
    if (!policy) continue;
    const upstreamMs = route.upstream.timeoutMs + TIMER_SLACK_MS;
    if (policy.lockTimeoutMs > upstreamMs) continue;
    warnings.push({
      route: route.name,
      message:
        `route "${route.name}": lockTimeout (${formatDuration(policy.lockTimeoutMs)}) is not longer than ` +
        `upstream "${route.upstream.name}"'s timeout (${formatDuration(route.upstream.timeoutMs)}) plus 1s: ` +
        `a repeat can ${policy.unknownOutcome === 'retry' ? 'take over and forward again' : 'settle the key as an unknown outcome'} ` +
        'while the first request is still running. Raise lockTimeout or lower the timeout.',
    });
  }
  return warnings;
}
