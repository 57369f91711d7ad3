import fc from 'fast-check';
import {
  DuplicateJsonKeyError,
  MAX_DEPTH,
  canonicalJson,
  canonicalNumber,
  jsonValueAt,
  readJson,
} from '../../src/idempotency/canonical-json';

/** A reference RFC 8785 serialiser (numbers via the nearest double), for documents JSON.parse reads exactly. */
function jcs(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(jcs).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const object = value as Record<string, unknown>;
    const members = Object.keys(object)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${jcs(object[key])}`);
    return `{${members.join(',')}}`;
  }
  return JSON.stringify(value);
}

/** A small seeded PRNG so a property can shuffle keys and sprinkle whitespace reproducibly. */
function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Re-renders a JSON value with shuffled keys, random whitespace and randomly \u-escaped characters. */
function reRender(value: unknown, random: () => number): string {
  const ws = (): string => [' ', '\n', '\t', '\r', ''][Math.floor(random() * 5)] as string;
  const str = (text: string): string =>
    `"${[...text]
      .map((c) => {
        if (c.length === 1 && random() < 0.3) {
          return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
        }
        return JSON.stringify(c).slice(1, -1);
      })
      .join('')}"`;
  if (Array.isArray(value))
    return `[${ws()}${value.map((v) => reRender(v, random)).join(`${ws()},${ws()}`)}${ws()}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value as Record<string, unknown>);
    for (let i = entries.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [entries[i], entries[j]] = [entries[j] as [string, unknown], entries[i] as [string, unknown]];
    }
    const members = entries.map(
      ([k, v]) => `${ws()}${str(k)}${ws()}:${ws()}${reRender(v, random)}`,
    );
    return `{${members.join(',')}${ws()}}`;
  }
  if (typeof value === 'string') return str(value);
  return JSON.stringify(value);
}

/** An exact decimal m × 10^e, normalised so equal values have equal (m, e). */
interface Decimal {
  mantissa: bigint;
  exponent: number;
}

function normalise({ mantissa, exponent }: Decimal): string {
  if (mantissa === 0n) return '0';
  let m = mantissa;
  let e = exponent;
  while (m % 10n === 0n) {
    m /= 10n;
    e++;
  }
  return `${m}e${e}`;
}

/** Spells m × 10^e as JSON number text, moving the decimal point `shift` places and padding `zeros` trailing zeros. */
function spell(
  { mantissa, exponent }: Decimal,
  shift: number,
  zeros: number,
  upperE: boolean,
): string {
  const negative = mantissa < 0n;
  const digits = `${negative ? -mantissa : mantissa}${'0'.repeat(zeros)}`;
  let e = exponent - zeros;
  // Put the decimal point `shift` digits from the right (0 = integer), adjusting the exponent.
  const point = Math.min(shift, digits.length - 1);
  e += point;
  const intPart = digits.slice(0, digits.length - point);
  const frac = digits.slice(digits.length - point);
  const int = intPart.replace(/^0+(?=\d)/, '');
  const body = frac === '' ? int : `${int}.${frac}`;
  const exp =
    e === 0 && shift % 2 === 0
      ? ''
      : `${upperE ? 'E' : 'e'}${e >= 0 && shift % 3 === 0 ? '+' : ''}${e}`;
  return `${negative ? '-' : ''}${body}${exp}`;
}

const decimal = fc.record({
  mantissa: fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }),
  exponent: fc.integer({ min: -40, max: 40 }),
});

describe('canonicalJson', () => {
  describe('structure', () => {
    it('sorts object keys and removes whitespace', () => {
      expect(canonicalJson('{ "b": 2,\n "a": [1, {"d": 4, "c": 3}] }')).toBe(
        '{"a":[1,{"c":3,"d":4}],"b":2}',
      );
    });

    it('treats {"a":1,"b":2} and {"b":2,"a":1} as equal', () => {
      expect(canonicalJson('{"a":1,"b":2}')).toBe(canonicalJson('{"b":2,"a":1}'));
    });

    it('keeps array order', () => {
      expect(canonicalJson('[2,1]')).not.toBe(canonicalJson('[1,2]'));
    });

    it('sorts keys by UTF-16 code units, as RFC 8785 does (not by code point)', () => {
      // U+1F600 is the surrogate pair D83D DE00, which sorts before U+FFFD in UTF-16 order.
      expect(canonicalJson('{"\\ufffd":1,"\\ud83d\\ude00":2,"a":3,"10":4,"9":5}')).toBe(
        '{"10":4,"9":5,"a":3,"\u{1f600}":2,"\ufffd":1}',
      );
    });

    it('serialises top-level scalars', () => {
      expect(canonicalJson(' "x" ')).toBe('"x"');
      expect(canonicalJson('true')).toBe('true');
      expect(canonicalJson('null')).toBe('null');
      expect(canonicalJson('1.50')).toBe('1.5');
    });

    it('refuses duplicate keys, whichever parser reads the document (SPEC: the upstream may read the other one)', () => {
      for (const text of [
        '{"amount":1000,"amount":1}',
        '{"a":1,"a":1}',
        '{"a":1.5,"a":2.50}',
        '{"a":12345678901234567890,"a":1}',
        '{"a":1e3,"a":1e3}',
        '{"x":[{"b":1,"b":2}]}',
        '{"a":{"b":1,"b":2}}',
        '{"__proto__":1,"__proto__":2}',
        '{"a":1, "a" : 2}',
      ])
        expect(() => canonicalJson(text)).toThrow(DuplicateJsonKeyError);
    });

    it('counts only members, not colons or quotes inside strings', () => {
      expect(canonicalJson('{"note":"\\"a\\":1,\\"a\\":2","b":"x:y"}')).toBe(
        '{"b":"x:y","note":"\\"a\\":1,\\"a\\":2"}',
      );
      expect(canonicalJson('{"a\\\\":"::","b":["\\\\",":"]}')).toBe(
        '{"a\\\\":"::","b":["\\\\",":"]}',
      );
      expect(canonicalJson('[{"a":1},{"a":2}]')).toBe('[{"a":1},{"a":2}]');
    });

    it('keeps a "__proto__" key as an ordinary member', () => {
      expect(canonicalJson('{"__proto__":{"x":1},"a":2}')).toBe('{"__proto__":{"x":1},"a":2}');
      expect(canonicalJson('{"__proto__":{"x":1.0}}')).toBe('{"__proto__":{"x":1}}');
      expect(canonicalJson('{"__proto__":1}')).not.toBe(canonicalJson('{}'));
    });

    it('accepts a Buffer', () => {
      expect(canonicalJson(Buffer.from('{"b":1,"a":"é"}'))).toBe('{"a":"é","b":1}');
    });
  });

  describe('strings', () => {
    it('treats "\\u0041" and "A" as equal', () => {
      expect(canonicalJson('["\\u0041"]')).toBe('["A"]');
    });

    it('re-serialises escapes the way JSON.stringify does', () => {
      expect(canonicalJson('"\\/\\b\\f\\n\\r\\t\\u001f\\u00e9\\"\\\\"')).toBe(
        '"/\\b\\f\\n\\r\\t\\u001fé\\"\\\\"',
      );
    });

    it('normalises escaped keys too', () => {
      expect(canonicalJson('{"\\u0061":1}')).toBe('{"a":1}');
    });

    it('keeps a lone surrogate escaped rather than corrupting it', () => {
      expect(canonicalJson('"\\ud800"')).toBe('"\\ud800"');
      expect(canonicalJson('"\\ud800"')).not.toBe(canonicalJson('"\\ud801"'));
    });
  });

  describe('numbers', () => {
    it.each([
      '1',
      '1.0',
      '1e0',
      '1E0',
      '1e+0',
      '10e-1',
      '0.1e1',
      '100e-2',
      '1.000',
      '0001e0'.slice(3),
    ])('reads %s as 1', (text) => {
      expect(canonicalJson(`[${text}]`)).toBe('[1]');
    });

    it('treats -0 as 0', () => {
      expect(canonicalJson('[-0, -0.0, 0e5, -0E-3]')).toBe('[0,0,0,0]');
    });

    it('keeps big integers exact: 12345678901234567890 differs from 12345678901234567891', () => {
      const a = canonicalJson('{"id":12345678901234567890}');
      const b = canonicalJson('{"id":12345678901234567891}');
      expect(a).toBe('{"id":12345678901234567890}');
      expect(b).toBe('{"id":12345678901234567891}');
      // JSON.parse would make them equal: the bug this module exists to avoid.
      expect(JSON.parse('12345678901234567890')).toBe(JSON.parse('12345678901234567891'));
    });

    it('keeps decimals exact beyond double precision', () => {
      expect(canonicalJson('[0.10000000000000001]')).toBe('[0.10000000000000001]');
      expect(canonicalJson('[0.10000000000000001]')).not.toBe(canonicalJson('[0.1]'));
    });

    it('keeps 2^53 + 1 distinct from 2^53', () => {
      expect(canonicalJson('[9007199254740993]')).not.toBe(canonicalJson('[9007199254740992]'));
    });

    it('gives the same answer for a small integer whether or not the document needs exact parsing', () => {
      expect(canonicalJson('[123456789012345, -7, 0, -0]')).toBe('[123456789012345,-7,0,0]');
      expect(canonicalJson('[123456789012345, -7, 0, -0, 1.5]')).toBe(
        '[123456789012345,-7,0,0,1.5]',
      );
    });

    it.each([
      ['0.001', '0.001'],
      ['0.000001', '0.000001'],
      ['1e-7', '1e-7'],
      ['1.5e-7', '1.5e-7'],
      ['123.4560', '123.456'],
      ['-1.50E+3', '-1500'],
      ['1e20', '100000000000000000000'],
      ['1e21', '1e+21'],
      ['123456789012345678901', '123456789012345678901'],
      ['1234567890123456789012', '1.234567890123456789012e+21'],
      ['1.2345678901234567890123e22', '1.2345678901234567890123e+22'],
      ['1e0000000000000000000000005', '100000'],
      ['1e99999999999999999999', '1e+99999999999999999999'],
      ['-25e-99999999999999999999', '-2.5e-99999999999999999998'],
      ['0e99999999999999999999', '0'],
    ])('canonicalises %s as %s', (text, expected) => {
      expect(canonicalNumber(text)).toBe(expected);
    });

    it('spells every double the way JSON.stringify (and RFC 8785) does', () => {
      fc.assert(
        fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (d) => {
          expect(canonicalNumber(String(d))).toBe(JSON.stringify(d));
        }),
      );
    });

    it('maps any two spellings of the same decimal value to the same text', () => {
      fc.assert(
        fc.property(
          decimal,
          fc.tuple(fc.nat(6), fc.nat(4), fc.boolean()),
          fc.tuple(fc.nat(6), fc.nat(4), fc.boolean()),
          (value, [shiftA, zerosA, upperA], [shiftB, zerosB, upperB]) => {
            const a = spell(value, shiftA, zerosA, upperA);
            const b = spell(value, shiftB, zerosB, upperB);
            expect(canonicalNumber(a)).toBe(canonicalNumber(b));
          },
        ),
      );
    });

    it('maps different decimal values to different texts', () => {
      fc.assert(
        fc.property(decimal, decimal, fc.nat(6), fc.nat(4), (a, b, shift, zeros) => {
          fc.pre(normalise(a) !== normalise(b));
          expect(canonicalNumber(spell(a, shift, zeros, false))).not.toBe(
            canonicalNumber(spell(b, 0, 0, false)),
          );
        }),
      );
    });

    it('spells equivalent forms as the value they denote', () => {
      fc.assert(
        fc.property(decimal, fc.nat(6), fc.nat(4), fc.boolean(), (value, shift, zeros, upper) => {
          const expected = Number(`${value.mantissa}e${value.exponent}`);
          expect(Number(spell(value, shift, zeros, upper))).toBe(expected);
          expect(Number(canonicalNumber(spell(value, shift, zeros, upper)))).toBe(expected);
        }),
      );
    });

    it('gives a plain decimal the same text on the fast (JSON.parse) path as on the exact one', () => {
      // Up to 15 digits without an exponent take JSON.parse; 16 or more take lossless-json. Either
      // way a number's text must be canonicalNumber's, or one body could get two fingerprints.
      const digits = (max: number) => fc.stringMatching(new RegExp(`^[0-9]{0,${max}}$`));
      fc.assert(
        fc.property(fc.boolean(), digits(12), digits(12), (negative, int, frac) => {
          const token = `${negative ? '-' : ''}${int.replace(/^0+(?=\d)/, '') || '0'}${frac ? `.${frac}` : ''}`;
          expect(canonicalJson(`{"n":${token}}`)).toBe(`{"n":${canonicalNumber(token)}}`);
          expect(canonicalJson(`[${token}, 1e0]`)).toBe(`[${canonicalNumber(token)},1]`);
        }),
        { numRuns: 2000 },
      );
    });

    it('keeps decimals that share a double apart (16 digits and more take the exact path)', () => {
      expect(canonicalJson('[0.1000000000000000055511151231257827]')).toBe(
        '[0.1000000000000000055511151231257827]',
      );
      expect(canonicalJson('[0.1000000000000000055511151231257827]')).not.toBe(
        canonicalJson('[0.1]'),
      );
      expect(canonicalJson('{"a":9007199254740993.5}')).not.toBe(
        canonicalJson('{"a":9007199254740992}'),
      );
      expect(canonicalJson('{"amount":49.99}')).toBe('{"amount":49.99}');
      expect(canonicalJson('{"amount":49.990}')).toBe(canonicalJson('{"amount":4.999e1}'));
    });

    it('is invariant under re-spelling numbers in equivalent forms inside documents', () => {
      fc.assert(
        fc.property(
          fc.array(fc.tuple(decimal, fc.nat(6), fc.nat(4), fc.boolean()), { maxLength: 8 }),
          (numbers) => {
            const plain = `[${numbers.map(([d]) => spell(d, 0, 0, false)).join(',')}]`;
            const respelled = `[${numbers.map(([d, shift, zeros, upper]) => spell(d, shift, zeros, upper)).join(' , ')}]`;
            expect(canonicalJson(respelled)).toBe(canonicalJson(plain));
          },
        ),
      );
    });
  });

  describe('invalid input', () => {
    it.each([
      ['empty', ''],
      ['whitespace', '  '],
      ['truncated', '{"a":'],
      ['trailing comma', '[1,]'],
      ['single quotes', "{'a':1}"],
      ['leading zero', '[01]'],
      ['bare dot', '[.5]'],
      ['trailing garbage', '{} x'],
      ['two documents', '{}{}'],
      ['NaN', '[NaN]'],
      ['raw control character in a string', '"a\tb"'],
      ['bad escape', '"\\x"'],
      ['comment', '[1] // c'],
    ])('returns null for %s', (_name, text) => {
      expect(canonicalJson(text)).toBeNull();
    });

    it('returns null for bytes that are not UTF-8 instead of replacing them', () => {
      const invalid = Buffer.concat([Buffer.from('"a'), Buffer.from([0xff]), Buffer.from('"')]);
      expect(canonicalJson(invalid)).toBeNull();
    });

    it('returns null for a body with a byte order mark (RFC 8259 §8.1)', () => {
      expect(canonicalJson(Buffer.from('\ufeff{}'))).toBeNull();
    });

    it(`returns null for documents nested deeper than ${MAX_DEPTH} levels instead of overflowing the stack`, () => {
      const ok = '['.repeat(MAX_DEPTH) + ']'.repeat(MAX_DEPTH);
      const deep = '['.repeat(MAX_DEPTH + 1) + ']'.repeat(MAX_DEPTH + 1);
      expect(canonicalJson(ok)).toBe(ok);
      expect(canonicalJson(deep)).toBeNull();
      expect(canonicalJson(`[1.5,${'['.repeat(100_000)}${']'.repeat(100_000)}]`)).toBeNull();
      expect(canonicalJson('{"a":'.repeat(200_000) + '1' + '}'.repeat(200_000))).toBeNull();
    });
  });

  describe('ignore', () => {
    const body = '{"meta":{"sent_at":"2024-01-01T00:00:00Z","trace":"t"},"amount":1}';

    it('drops a field by path', () => {
      expect(canonicalJson(body, [['meta', 'sent_at']])).toBe('{"amount":1,"meta":{"trace":"t"}}');
    });

    it('drops a whole subtree', () => {
      expect(canonicalJson(body, [['meta']])).toBe('{"amount":1}');
    });

    it('applies several paths', () => {
      expect(canonicalJson(body, [['meta', 'sent_at'], ['amount']])).toBe('{"meta":{"trace":"t"}}');
    });

    it('is a no-op for a missing field', () => {
      expect(
        canonicalJson(body, [
          ['meta', 'nope'],
          ['nope', 'x'],
        ]),
      ).toBe(canonicalJson(body));
    });

    it('is a no-op for a path through a non-object', () => {
      expect(
        canonicalJson(body, [
          ['amount', 'x'],
          ['meta', 'trace', 'y'],
        ]),
      ).toBe(canonicalJson(body));
    });

    it('does not index arrays: a path never reaches inside one', () => {
      const withArray = '{"items":[{"sent_at":1},{"sent_at":2}]}';
      expect(canonicalJson(withArray, [['items', 'sent_at']])).toBe(withArray);
      expect(canonicalJson(withArray, [['items', '0', 'sent_at']])).toBe(withArray);
      expect(canonicalJson('[{"a":1}]', [['a']])).toBe('[{"a":1}]');
    });

    it('treats an empty path as a no-op rather than dropping the whole body', () => {
      expect(canonicalJson(body, [[]])).toBe(canonicalJson(body));
    });

    it('does not drop same-named fields at other depths', () => {
      expect(canonicalJson('{"sent_at":1,"meta":{"sent_at":2}}', [['meta', 'sent_at']])).toBe(
        '{"meta":{},"sent_at":1}',
      );
    });
  });

  describe('properties', () => {
    it('agrees with an RFC 8785 reference on documents JSON.stringify produces', () => {
      fc.assert(
        fc.property(fc.jsonValue({ stringUnit: 'binary' }), (value) => {
          expect(canonicalJson(JSON.stringify(value))).toBe(jcs(value));
        }),
      );
    });

    it('is invariant under key reordering, whitespace and \\u escapes', () => {
      fc.assert(
        fc.property(fc.jsonValue({ stringUnit: 'binary' }), fc.integer(), (value, seed) => {
          const text = reRender(value, prng(seed));
          expect(canonicalJson(text)).toBe(canonicalJson(JSON.stringify(value)));
        }),
      );
    });

    it('produces valid JSON that canonicalises to itself', () => {
      fc.assert(
        fc.property(fc.jsonValue(), (value) => {
          const canonical = canonicalJson(JSON.stringify(value)) as string;
          expect(() => JSON.parse(canonical) as unknown).not.toThrow();
          expect(canonicalJson(canonical)).toBe(canonical);
        }),
      );
    });
  });
});

describe('jsonValueAt', () => {
  const body =
    '{"order":{"id":12345678901234567890,"lines":[{"sku":"a"}],"meta":{"at":1}},"n":null}';

  it('returns the canonical JSON of the value at a path', () => {
    expect(jsonValueAt(body, ['order', 'id'])).toBe('12345678901234567890');
    expect(jsonValueAt(body, ['order', 'meta'])).toBe('{"at":1}');
  });

  it('returns "null" for a present null, distinct from absent', () => {
    expect(jsonValueAt(body, ['n'])).toBe('null');
    expect(jsonValueAt(body, ['missing'])).toBeUndefined();
  });

  it('returns the whole document for an empty path', () => {
    expect(jsonValueAt('{"b":1,"a":2}', [])).toBe('{"a":2,"b":1}');
  });

  it('returns undefined through a non-object or an array', () => {
    expect(jsonValueAt(body, ['n', 'x'])).toBeUndefined();
    expect(jsonValueAt(body, ['order', 'lines', '0'])).toBeUndefined();
    expect(jsonValueAt(body, ['order', 'id', 'x'])).toBeUndefined();
  });

  it('does not find inherited properties', () => {
    expect(jsonValueAt('{}', ['constructor'])).toBeUndefined();
    expect(jsonValueAt('{}', ['__proto__'])).toBeUndefined();
    expect(jsonValueAt('{"__proto__":1}', ['__proto__'])).toBe('1');
  });

  it('returns undefined when the body is not JSON', () => {
    expect(jsonValueAt('not json', ['a'])).toBeUndefined();
    expect(jsonValueAt(Buffer.from([0xff]), [])).toBeUndefined();
  });

  it('applies ignore paths inside the value and treats an ignored field as absent', () => {
    expect(jsonValueAt(body, ['order'], [['order', 'meta', 'at']])).toBe(
      '{"id":12345678901234567890,"lines":[{"sku":"a"}],"meta":{}}',
    );
    expect(jsonValueAt(body, ['order', 'meta', 'at'], [['order', 'meta']])).toBeUndefined();
  });
});

describe('readJson', () => {
  const reason = (body: Buffer | string) => {
    const reading = readJson(body);
    return reading.ok ? 'ok' : reading.reason;
  };
  const nested = (depth: number, inner = '0') => '['.repeat(depth) + inner + ']'.repeat(depth);

  it('says why a body is not read: bytes that are not UTF-8, text that is not JSON', () => {
    expect(reason(Buffer.from('{"a":"\xff"}', 'latin1'))).toBe('not_utf8');
    expect(reason(Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc3, 0x22, 0x7d]))).toBe(
      'not_utf8',
    );
    expect(reason('')).toBe('not_json');
    expect(reason('{"a":')).toBe('not_json');
    // A BOM is not JSON: a caller that accepts one strips it itself.
    expect(reason(Buffer.from('\ufeff{"a":1}'))).toBe('not_json');
    expect(reason('{"a":1}')).toBe('ok');
  });

  it(`says too_deep past ${MAX_DEPTH} levels, on the fast and on the exact-number path`, () => {
    expect(reason(nested(MAX_DEPTH))).toBe('ok');
    expect(reason(nested(MAX_DEPTH + 1))).toBe('too_deep');
    expect(reason(nested(MAX_DEPTH, '1e5'))).toBe('ok');
    expect(reason(nested(MAX_DEPTH + 1, '1e5'))).toBe('too_deep');
    expect(reason(nested(200_000, '1e5'))).toBe('too_deep');
  });

  it('says duplicate_key for a key twice in any object, however it is spelt, on both paths', () => {
    expect(reason('{"a":1,"a":1}')).toBe('duplicate_key');
    expect(reason('{"a":1,"\\u0061":2}')).toBe('duplicate_key');
    expect(reason('{"x":[{"deep":{"a":1,"a":2}}]}')).toBe('duplicate_key');
    expect(reason('{"n":1e5,"a":1,"a":2}')).toBe('duplicate_key');
    expect(reason('{"a":"a:b","b":{"a":1}}')).toBe('ok');
  });
});
