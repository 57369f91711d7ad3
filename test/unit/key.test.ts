import fc from 'fast-check';
import { parseIdempotencyKey, type KeyParseResult } from '../../src/idempotency/key';

const MAX = 255;

function parse(...values: string[]): KeyParseResult {
  return parseIdempotencyKey(values, MAX);
}

function expectKey(result: KeyParseResult, key: string): void {
  expect(result).toEqual({ ok: true, key });
}

function expectInvalid(result: KeyParseResult, detail: RegExp): void {
  expect(result.ok).toBe(false);
  if (result.ok) return;
  expect(result.problem).toBe('invalid');
  expect(result.detail).toMatch(detail);
}

/** Quotes a key as an RFC 8941 sf-string. */
function sfString(key: string): string {
  return `"${key.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

const visibleAscii = fc.string({
  unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)),
  minLength: 1,
  maxLength: MAX,
});

describe('parseIdempotencyKey', () => {
  describe('missing and repeated headers', () => {
    it('reports a missing key when the header is absent', () => {
      const result = parseIdempotencyKey(undefined, MAX);
      expect(result).toMatchObject({ ok: false, problem: 'missing' });
    });

    it('reports a missing key for an empty list of header lines', () => {
      expect(parseIdempotencyKey([], MAX)).toMatchObject({ ok: false, problem: 'missing' });
    });

    it('rejects a key sent on two header lines and asks for it once', () => {
      expectInvalid(parse('abc', 'abc'), /sent 2 times; send the key once/);
    });

    it('words details with the configured header name', () => {
      const result = parseIdempotencyKey(undefined, MAX, 'X-Request-Key');
      expect(result.ok || result.detail).toMatch(/^X-Request-Key header is required/);
    });
  });

  describe('bare keys', () => {
    it('accepts a bare token', () => {
      expectKey(parse('abc-123'), 'abc-123');
    });

    it('accepts a UUID, which is not an RFC 8941 token (it may start with a digit)', () => {
      expectKey(
        parse('0f8fad5b-d9cb-469f-a165-70867728950e'),
        '0f8fad5b-d9cb-469f-a165-70867728950e',
      );
    });

    it('trims optional whitespace around the value', () => {
      expectKey(parse(' \tabc-123 \t'), 'abc-123');
    });

    it('accepts any visible ASCII in a bare key, including quotes and backslashes after the start', () => {
      expectKey(parse('a"b\\c;p=1'), 'a"b\\c;p=1');
    });
  });

  describe('quoted keys (RFC 8941 sf-string)', () => {
    it('unquotes a quoted key', () => {
      expectKey(parse('"abc-123"'), 'abc-123');
    });

    it('unescapes \\" and \\\\', () => {
      expectKey(parse('"a\\"b\\\\c"'), 'a"b\\c');
    });

    it('rejects any other backslash escape', () => {
      expectInvalid(parse('"a\\nb"'), /invalid escape at character 3.*RFC 8941 §3\.3\.3/);
    });

    it('rejects a backslash at the very end', () => {
      expectInvalid(parse('"abc\\'), /invalid escape/);
    });

    it('rejects an unterminated quoted key', () => {
      expectInvalid(parse('"abc'), /no closing quote/);
    });

    it('rejects a lone double quote', () => {
      expectInvalid(parse('"'), /no closing quote/);
    });

    it('rejects characters after the closing quote', () => {
      expectInvalid(parse('"abc"def'), /characters after the closing quote; send exactly one key/);
    });

    it('rejects a list of two quoted keys on one line', () => {
      expectInvalid(parse('"a", "b"'), /characters after the closing quote/);
    });

    it('rejects RFC 8941 parameters with a detail that says they are not used', () => {
      expectInvalid(
        parse('"abc";p=1'),
        /parameters after the quoted key.*does not use; send just the key/,
      );
    });

    it('rejects an empty quoted key ""', () => {
      expectInvalid(parse('""'), /must be 1 to 255 visible ASCII characters \(got an empty key\)/);
    });

    it('rejects a space inside quotes, which sf-string allows but keys do not', () => {
      expectInvalid(parse('"a b"'), /U\+0020 \(space\) at character 2/);
    });

    it('counts the length of the unescaped key', () => {
      const key = `${'a'.repeat(253)}"`;
      expect(sfString(key).length).toBe(257);
      expectKey(parse(sfString(key)), key);
    });
  });

  describe('length', () => {
    it('rejects an empty header value', () => {
      expectInvalid(parse(''), /got an empty key/);
    });

    it('rejects a value of only whitespace', () => {
      expectInvalid(parse('  \t '), /got an empty key/);
    });

    it('accepts a 1-character key', () => {
      expectKey(parse('a'), 'a');
    });

    it('accepts a key of exactly maxLength characters', () => {
      const key = 'k'.repeat(255);
      expectKey(parse(key), key);
    });

    it('rejects a key one character over maxLength with a detail that says what to do', () => {
      const result = parse('k'.repeat(256));
      expect(result).toEqual({
        ok: false,
        problem: 'invalid',
        detail:
          'Idempotency-Key must be 1 to 255 visible ASCII characters (got 256 characters); send a shorter key such as a UUID.',
      });
    });

    it('applies the configured maxLength', () => {
      expect(parseIdempotencyKey(['abcd'], 3).ok).toBe(false);
      expect(parseIdempotencyKey(['abc'], 3).ok).toBe(true);
    });
  });

  describe('characters', () => {
    it.each([
      ['a tab', 'a\tb', /U\+0009 \(tab\) at character 2/],
      ['a newline', 'a\nb', /U\+000A \(line feed\) at character 2/],
      ['a carriage return', 'a\rb', /U\+000D \(carriage return\)/],
      ['DEL', 'a\x7fb', /U\+007F \(DEL\) at character 2/],
      ['a NUL', 'a\x00b', /U\+0000 at character 2/],
      ['an inner space', 'a b', /U\+0020 \(space\) at character 2/],
      ['é', 'caf\u00e9', /U\+00E9 at character 4/],
      [
        'UTF-8 bytes of é as Node decodes them (latin1)',
        'caf\u00c3\u00a9',
        /U\+00C3 at character 4/,
      ],
      ['a non-BMP character', 'a\u{1f600}', /U\+D83D at character 2/],
    ])('rejects %s in a bare key', (_name, key, detail) => {
      expectInvalid(parse(key), detail);
    });

    it.each([
      ['a tab', '"a\tb"', /U\+0009 \(tab\) at character 3/],
      ['a newline', '"a\nb"', /U\+000A \(line feed\)/],
      ['DEL', '"a\x7fb"', /U\+007F \(DEL\)/],
      ['é', '"caf\u00e9"', /U\+00E9 at character 5/],
    ])('rejects %s in a quoted key', (_name, value, detail) => {
      expectInvalid(parse(value), detail);
    });

    it('never echoes a control or non-ASCII character into a detail', () => {
      fc.assert(
        fc.property(
          fc.array(fc.string({ unit: 'binary' }), { minLength: 1, maxLength: 2 }),
          (values) => {
            const result = parseIdempotencyKey(values, 40);
            if (!result.ok) expect(result.detail).toMatch(/^[\x20-\x7e]*$/);
          },
        ),
      );
    });
  });

  describe('properties', () => {
    it('parses any visible-ASCII key, quoted with escapes, back to itself', () => {
      fc.assert(
        fc.property(visibleAscii, (key) => {
          expect(parse(sfString(key))).toEqual({ ok: true, key });
        }),
      );
    });

    it('parses any visible-ASCII bare key that does not start with a quote to itself', () => {
      fc.assert(
        fc.property(
          visibleAscii.filter((key) => !key.startsWith('"')),
          (key) => {
            expect(parse(key)).toEqual({ ok: true, key });
          },
        ),
      );
    });

    it('never accepts a key outside 1..maxLength visible ASCII characters', () => {
      fc.assert(
        fc.property(
          fc.string({ unit: 'binary-ascii', maxLength: 20 }),
          fc.integer({ min: 1, max: 10 }),
          (value, max) => {
            const result = parseIdempotencyKey([value], max);
            if (result.ok) expect(result.key).toMatch(new RegExp(`^[\\x21-\\x7e]{1,${max}}$`));
          },
        ),
      );
    });
  });
});
