import fc from 'fast-check';
import {
  canonicalAuthority,
  canonicalPath,
  canonicalTarget,
  isTargetProblem,
} from '../../src/http/canonical-target';

describe('canonical paths (src/http/README.md)', () => {
  test.each([
    ['/refunds', '/refunds'],
    ['/', '/'],
    ['//refunds', '/refunds'],
    ['///refunds///', '/refunds/'],
    ['/./refunds', '/refunds'],
    ['/x/../refunds', '/refunds'],
    ['/../refunds', '/refunds'],
    ['/%2e%2e/refunds', '/refunds'],
    ['/.%2e/refunds', '/refunds'],
    ['/%2E./refunds', '/refunds'],
    ['/a/b/../../refunds', '/refunds'],
    ['/./refunds/.', '/refunds/'],
    ['/refunds/..', '/'],
    ['/a/b/..', '/a/'],
    ['/%72efunds', '/refunds'],
    ['/%7e%41', '/~A'],
    ['/caf%c3%a9', '/caf%C3%A9'],
    ['/a b', '/a%20b'],
    ['/caf\u00c3\u00a9', '/caf%C3%A9'],
    ['/a{b}|c', '/a%7Bb%7D%7Cc'],
    ['/.well-known/x', '/.well-known/x'],
    ['/v1/items:batch', '/v1/items:batch'],
    ['/..foo/...', '/..foo/...'],
    ['/a;b=c', '/a;b=c'],
  ])('%s → %s', (raw, canonical) => {
    expect(canonicalPath(raw)).toBe(canonical);
  });

  test.each([
    ['/refunds%2F', 'slash'],
    ['/refunds%2f', 'slash'],
    ['/%2Frefunds', 'slash'],
    ['/refunds%5C', 'backslash'],
    ['/refunds%5c', 'backslash'],
    ['/refunds\\', 'backslash'],
    ['/re%zzfunds', 'percent'],
    ['/refunds%4', 'percent'],
    ['/refunds%', 'percent'],
    ['/a%00b', 'NUL'],
  ])('%s is refused (%s)', (raw, what) => {
    const result = canonicalPath(raw);
    expect(isTargetProblem(result)).toBe(true);
    if (isTargetProblem(result)) {
      expect(result.problem).toBe('target');
      expect(result.detail).toContain(what);
    }
  });

  test('is idempotent and leaves no dot segment, empty segment or lower-case escape', () => {
    const piece = fc.constantFrom(
      'a',
      'B',
      '.',
      '..',
      '',
      '%2e',
      '%2E',
      '%41',
      '%c3%a9',
      '~',
      ' ',
      '%7e',
    );
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 8 }), (pieces) => {
        const once = canonicalPath(`/${pieces.join('/')}`);
        if (isTargetProblem(once)) throw new Error(`refused: ${once.detail}`);
        expect(canonicalPath(once)).toBe(once);
        expect(once).not.toMatch(/\/\.\.?(?:\/|$)|\/\/|%(?:[a-f][0-9A-Fa-f]|[0-9A-F][a-f])/);
      }),
      { numRuns: 500 },
    );
  });
});

describe('canonical targets', () => {
  test('keeps the query byte for byte, encoded slashes included', () => {
    expect(canonicalTarget('/a/./b?next=%2Fhome&x=%zz')).toEqual({
      path: '/a/b',
      query: 'next=%2Fhome&x=%zz',
      authority: undefined,
    });
  });

  test('takes the authority of an absolute-form target', () => {
    expect(canonicalTarget('http://Mail.Internal.:8080/emails?x=1')).toEqual({
      path: '/emails',
      query: 'x=1',
      authority: 'mail.internal:8080',
    });
    expect(canonicalTarget('HTTPS://h')).toEqual({ path: '/', query: '', authority: 'h' });
    expect(canonicalTarget('http://h?q')).toEqual({ path: '/', query: 'q', authority: 'h' });
  });

  test('reads each target as itself, whichever was read before it', () => {
    // The last target's reading is kept for its repeats: never for another target.
    const targets = ['/a/./b?x=1', '/a/b?x=1', '/a/./b?x=1', '/a/./b?x=2', '', 'refunds', '/c'];
    const first = new Map(targets.map((raw) => [raw, canonicalTarget(raw)]));
    for (const raw of [...targets, ...targets.reverse()])
      expect(canonicalTarget(raw)).toEqual(first.get(raw));
    expect(canonicalTarget('/a/./b?x=1')).toEqual({
      path: '/a/b',
      query: 'x=1',
      authority: undefined,
    });
    expect(canonicalTarget('/a/./b?x=2')).toEqual({
      path: '/a/b',
      query: 'x=2',
      authority: undefined,
    });
    expect(isTargetProblem(canonicalTarget(''))).toBe(true);
  });

  test.each([
    ['/refunds#x', 'target'],
    ['/a?b#c', 'target'],
    ['*', 'target'],
    ['refunds', 'target'],
    ['ftp://h/x', 'target'],
    ['http://user@h/x', 'host'],
    ['http:///x', 'host'],
  ])('%s is refused (%s)', (raw, problem) => {
    const result = canonicalTarget(raw);
    expect(isTargetProblem(result) && result.problem).toBe(problem);
  });
});

describe('canonical authorities', () => {
  test.each([
    ['api.local', 'api.local'],
    ['API.Local.', 'api.local'],
    ['api.local.:8080', 'api.local:8080'],
    ['api.local:', 'api.local'],
    ['127.0.0.1:80', '127.0.0.1:80'],
    ['[::1]:8080', '[::1]:8080'],
    ['[FE80::1]', '[fe80::1]'],
  ])('%s → %s', (raw, canonical) => {
    expect(canonicalAuthority(raw)).toBe(canonical);
  });

  test.each(['', 'a b', 'a/b', 'user@h', 'a..b', '.', 'h:port', 'h:123456', 'api%2elocal', '[::1'])(
    '%j is refused',
    (raw) => {
      expect(isTargetProblem(canonicalAuthority(raw))).toBe(true);
    },
  );
});
