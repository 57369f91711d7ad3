// Assertions the edge suites share: a proxy-made problem+json answer, and the request log line a
// request produced (written just after its response ends, so it is awaited, not assumed).
import type { TestResponse } from './http';
import type { TestProxy } from './proxy';
import { until } from './eventually';

/** Codes Node's own HTTP parser answers with before the proxy sees the request. */
const PARSER_CODES = ['BAD_REQUEST'];

/**
 * The answer is the proxy's problem+json with this status and code. `parserMayReject`: bytes that
 * Node's parser itself may refuse first (NUL, control characters) also count with BAD_REQUEST.
 */
export function expectProblem(
  res: TestResponse,
  status: number,
  code: string,
  options: { parserMayReject?: boolean } = {},
): void {
  const described = `${res.status} ${res.text().slice(0, 300)}`;
  expect({ status: res.status, type: res.headers['content-type'], described }).toMatchObject({
    status,
    type: expect.stringMatching(/^application\/problem\+json/),
  });
  const problem = res.json<{ code: string; status: number; detail: unknown }>();
  const codes = options.parserMayReject ? [code, ...PARSER_CODES] : [code];
  expect({ code: problem.code, described }).toEqual({
    code: expect.stringMatching(new RegExp(`^(?:${codes.join('|')})$`)),
    described,
  });
  expect(problem.status).toBe(status);
  expect(typeof problem.detail).toBe('string');
}

export type LogLine = Record<string, unknown>;

export function requestLines(proxy: TestProxy): LogLine[] {
  return proxy.logs.filter((line) => line.msg === 'request');
}

/** Waits (bounded, polling) until `condition` holds; throws naming `what` if it never does. */
export async function awaitCondition(condition: () => boolean, what: string): Promise<void> {
  await until(condition, what, { intervalMs: 10 });
}

/** Waits (bounded) until the proxy has written at least `count` request lines, and returns them. */
export async function awaitRequestLines(proxy: TestProxy, count: number): Promise<LogLine[]> {
  await awaitCondition(
    () => requestLines(proxy).length >= count,
    `${count} request log lines (have ${requestLines(proxy).length})`,
  );
  return requestLines(proxy);
}

/**
 * Runs `request` and returns its answer with the one request log line it produced. Requests must
 * not overlap on this proxy while it runs.
 */
export async function withLogLine<T>(
  proxy: TestProxy,
  request: () => Promise<T>,
): Promise<{ res: T; line: LogLine }> {
  const before = requestLines(proxy).length;
  const res = await request();
  const lines = await awaitRequestLines(proxy, before + 1);
  return { res, line: lines[before]! };
}
