// Whether an upstream answer is a stream (the route's `streams:` rule): a stream is sent to the
// client chunk by chunk as it arrives, and stored once whole; any other answer is kept whole first.
import type { IncomingHttpHeaders } from 'node:http';
import type { StreamRule } from '../config/types';
import { statusHasBody } from '../http/response';

/**
 * True for an answer whose media type the rule names (`text/event-stream`, `application/x-ndjson`),
 * or, with `chunked: true`, one sent chunked with no Content-Length: its sender did not know its
 * length when it began, the mark of an answer produced as it goes.
 */
export function isStream(rule: StreamRule, status: number, headers: IncomingHttpHeaders): boolean {
  if (!statusHasBody(status)) return false;
  const type = mediaTypeOf(headers['content-type']);
  if (type !== undefined && rule.contentTypes.has(type)) return true;
  if (!rule.chunked || headers['content-length'] !== undefined) return false;
  const coding = headers['transfer-encoding'];
  return typeof coding === 'string' && /(?:^|,)\s*chunked\s*$/i.test(coding);
}

/** `text/event-stream; charset=utf-8` → `text/event-stream`. */
export function mediaTypeOf(contentType: string | undefined): string | undefined {
  if (contentType === undefined) return undefined;
  const type = contentType.split(';')[0]!.trim().toLowerCase();
  return type === '' ? undefined : type;
}
