import { isStream, mediaTypeOf } from '../../src/rest/stream-rule';
import { StreamCapture } from '../../src/protected/stream-capture';
import { LiveAnswer, type LiveListener } from '../../src/store/live-answer';

const RULE = {
  contentTypes: new Set(['text/event-stream', 'application/x-ndjson']),
  chunked: true,
};

describe('isStream', () => {
  test.each([
    ['an event stream', 200, { 'content-type': 'text/event-stream; charset=utf-8' }, true],
    ['NDJSON, whatever its case', 200, { 'content-type': 'Application/X-NDJSON' }, true],
    [
      'a typed stream with a Content-Length',
      200,
      { 'content-type': 'text/event-stream', 'content-length': '5' },
      true,
    ],
    [
      'chunked with no Content-Length',
      200,
      { 'transfer-encoding': 'chunked', 'content-type': 'application/json' },
      true,
    ],
    ['chunked after another coding', 200, { 'transfer-encoding': 'gzip, chunked' }, true],
    [
      'JSON with a Content-Length',
      200,
      { 'content-type': 'application/json', 'content-length': '12' },
      false,
    ],
    ['no length, not chunked (read to close)', 200, { 'content-type': 'application/json' }, false],
    ['a 204', 204, { 'content-type': 'text/event-stream' }, false],
    ['a 304', 304, { 'transfer-encoding': 'chunked' }, false],
  ])('%s', (_name, status, headers, expected) => {
    expect(isStream(RULE, status, headers)).toBe(expected);
  });

  test('chunked: false leaves a chunked answer of another type whole', () => {
    const rule = { ...RULE, chunked: false };
    expect(isStream(rule, 200, { 'transfer-encoding': 'chunked' })).toBe(false);
    expect(isStream(rule, 200, { 'content-type': 'text/event-stream' })).toBe(true);
  });

  test('mediaTypeOf drops parameters and case', () => {
    expect(mediaTypeOf(' Text/Event-Stream ;charset=utf-8')).toBe('text/event-stream');
    expect(mediaTypeOf('')).toBeUndefined();
    expect(mediaTypeOf(undefined)).toBeUndefined();
  });
});

describe('StreamCapture', () => {
  test('keeps chunks up to the limit, then lets go of them and hands them over once', () => {
    const capture = new StreamCapture(6);
    expect(capture.add(Buffer.from('abc'))).toBe(true);
    expect(capture.add(Buffer.from('def'))).toBe(true);
    expect(capture.body().toString()).toBe('abcdef');
    expect(capture.add(Buffer.from('g'))).toBe(false);
    expect(capture.whole).toBe(false);
    expect(capture.chunks).toEqual([]);
    expect(capture.body().length).toBe(0);
    expect(capture.takeOverflowed().map(String)).toEqual(['abc', 'def']);
    expect(capture.takeOverflowed()).toEqual([]);
    expect(capture.add(Buffer.from('h'))).toBe(false);
    expect(capture.total).toBe(8);
  });
});

describe('LiveAnswer', () => {
  const recorder = (): LiveListener & { seen: string[] } => {
    const seen: string[] = [];
    return {
      seen,
      chunk: (chunk) => seen.push(chunk.toString()),
      end: () => seen.push('end'),
      fail: () => seen.push('fail'),
    };
  };

  test('a listener gets what was captured so far, then each chunk, then the end', async () => {
    const live = new LiveAnswer();
    const capture = new StreamCapture(100);
    expect(live.attach(recorder())).toBeUndefined(); // nothing streams yet
    live.open({ status: 200, headers: [['content-type', 'text/event-stream']] }, capture);
    await expect(live.opened).resolves.toBe(true);
    capture.add(Buffer.from('a'));
    live.push(Buffer.from('a'));
    const listener = recorder();
    const joined = live.attach(listener)!;
    expect(joined.sofar.map(String)).toEqual(['a']);
    expect(joined.head.status).toBe(200);
    live.push(Buffer.from('b'));
    live.end();
    expect(listener.seen).toEqual(['b', 'end']);
    expect(live.attach(recorder())).toBeUndefined(); // over: the record answers now
  });

  test('a stream past its capture cannot be joined; one that breaks fails its listeners', () => {
    const live = new LiveAnswer();
    const capture = new StreamCapture(1);
    live.open({ status: 200, headers: [] }, capture);
    const listener = recorder();
    live.attach(listener);
    capture.add(Buffer.from('xy'));
    expect(live.attachable).toBe(false);
    live.close();
    expect(listener.seen).toEqual(['fail']);
  });

  test('an answer that never streamed tells its waiters so', async () => {
    const live = new LiveAnswer();
    live.close();
    await expect(live.opened).resolves.toBe(false);
  });
});
