// A REST route's probe (docs/reconcile.md): one request to the route's upstream, its path filled in
// from the key and the original body, bounded by the upstream's timeout like any forward.
import type { IncomingHttpHeaders } from 'node:http';
import type { ReconcilePolicy, RouteConfig } from '../config/types';
import type { UpstreamPools } from '../upstream/protected';
import type { ReconcileProbe } from './resolution';
import { fillTemplate, parseDocument, parseTemplate } from './template';
import { type ProbeAnswer, verdictOf } from './verdict';

/** Larger probe answers are cut here and read as inconclusive (a lookup answer is small). */
export const MAX_PROBE_BYTES = 1024 * 1024;

type RequestProbe = Extract<ReconcilePolicy['probe'], { kind: 'request' }>;

/**
 * A probe that is one HTTP request to the route's upstream, read under the route's found / not
 * found rules: REST's (rest/adapter.ts), and the reconciler's when it is handed no other.
 */
export const requestProbe: ReconcileProbe = async (ask) => {
  const probe = ask.reconcile.probe;
  if (probe.kind !== 'request') throw new Error('this route asks with a tool call, not a request');
  const answer = await sendRequestProbe(
    ask.upstreams,
    ask.route,
    probe,
    ask.key,
    ask.body,
    ask.retryHeaders,
  );
  return verdictOf(ask.reconcile, answer);
};

/**
 * Sends the probe and reads its answer; throws (TemplateUnfilled, or the transport's error) when
 * there is no answer to read.
 */
export async function sendRequestProbe(
  upstreams: UpstreamPools,
  route: RouteConfig,
  probe: RequestProbe,
  forwardedKey: string,
  body: Buffer | null,
  retryHeaders: IncomingHttpHeaders | undefined,
): Promise<ProbeAnswer> {
  const parts = parseTemplate(probe.path, 'body');
  if (typeof parts === 'string') throw new Error(parts); // checked when the config compiled
  const needsBody = parts.some((part) => part.kind === 'value');
  const document = needsBody && body !== null ? parseDocument(body) : undefined;
  const path = fillTemplate(parts, forwardedKey, document, 'body', (text) =>
    encodeURIComponent(text),
  );
  const headers: Record<string, string> = { accept: 'application/json' };
  if (probe.headers !== null) Object.assign(headers, probe.headers);
  else if (typeof retryHeaders?.authorization === 'string')
    headers.authorization = retryHeaders.authorization;
  let status = 0;
  let contentType: string | undefined;
  const chunks: Buffer[] = [];
  let bytes = 0;
  await upstreams.send(
    route.upstream,
    {
      method: probe.method,
      path: `${route.upstream.basePath}${path}`,
      headers,
      body: Buffer.alloc(0),
    },
    {
      head(answered, answerHeaders) {
        status = answered;
        const type = answerHeaders['content-type'];
        contentType = Array.isArray(type) ? type[0] : type;
      },
      data(chunk) {
        bytes += chunk.length;
        if (bytes <= MAX_PROBE_BYTES) chunks.push(chunk);
        return undefined;
      },
    },
  );
  if (bytes > MAX_PROBE_BYTES)
    throw new Error(`the probe answered more than ${MAX_PROBE_BYTES} bytes`);
  return { status, contentType, body: Buffer.concat(chunks) };
}
