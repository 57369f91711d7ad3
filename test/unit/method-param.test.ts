// The `_method` reader: what Rack, Laravel and Symfony would take as the method to run, found in a
// query or form, a multipart body or a JSON object, and the same input with it removed.
import {
  formMethodParams,
  jsonMethodParams,
  methodBodyKind,
  multipartMethodParams,
} from '../../src/http/method-param';
import { multipart } from '../support/readings-upstream';

describe('urlencoded forms and queries', () => {
  test.each([
    ['_method=DELETE', ['DELETE'], ''],
    ['a=1&_method=delete&b=2', ['DELETE'], 'a=1&b=2'],
    ['%5Fmethod=PUT&a=1', ['PUT'], 'a=1'],
    ['%5fmethod=PUT', ['PUT'], ''],
    ['.method=PATCH', ['PATCH'], ''],
    ['+_method=DELETE', ['DELETE'], ''],
    ['_method=DEL%45TE', ['DELETE'], ''],
    ['_method', [''], ''],
    ['_method=GET&_method=DELETE', ['GET', 'DELETE'], ''],
  ])('%s: %j found, %j kept', (text, methods, without) => {
    expect(formMethodParams(text)).toEqual({ methods, without });
  });

  test.each([
    'a=1&b=2',
    '',
    'method=DELETE',
    '_methods=DELETE',
    'x_method=DELETE',
    '_method[=DELETE',
    '%ZZ=1',
  ])('%s: none found, left as it is', (text) => {
    const read = formMethodParams(text);
    expect(read.methods).toEqual([]);
    expect(read.without).toBe(text);
  });

  test('a broken escape in a value does not hide the name', () => {
    expect(formMethodParams('_method=%E0%A4%A&a=1').methods).toHaveLength(1);
  });
});

describe('JSON bodies', () => {
  test.each([
    ['{"_method":"delete"}', ['DELETE']],
    ['{"amount":1,"_method":"PUT"}', ['PUT']],
    ['{"_method":1}', []],
    ['{"a":{"_method":"DELETE"}}', []],
    ['[{"_method":"DELETE"}]', []],
    ['{"_method":"DELETE"', []],
    ['"_method"', []],
    ['{"amount":1}', []],
  ])('%s: %j', (text, methods) => {
    expect(jsonMethodParams(Buffer.from(text))).toEqual(methods);
  });
});

const TYPE = 'multipart/form-data; boundary=proxy-test-boundary';

describe('multipart/form-data bodies', () => {
  test('the _method part is found and removed; the other parts are kept byte for byte', () => {
    const body = multipart([
      ['note', 'x'],
      ['_method', 'delete'],
      ['amount', '1000'],
    ]);
    const read = multipartMethodParams(body, TYPE)!;
    expect(read.methods).toEqual(['DELETE']);
    expect(
      read.without.equals(
        multipart([
          ['note', 'x'],
          ['amount', '1000'],
        ]),
      ),
    ).toBe(true);
  });

  test('a body without a _method is returned as it is', () => {
    const body = multipart([['note', 'x']]);
    const read = multipartMethodParams(body, TYPE)!;
    expect(read.methods).toEqual([]);
    expect(read.without).toBe(body);
  });

  test.each([
    ['quoted', 'multipart/form-data; boundary="a b:c"', 'a b:c'],
    ['bare, after another parameter', 'multipart/form-data; charset=utf-8; boundary=XyZ', 'XyZ'],
    ['upper-case name', 'multipart/form-data; BOUNDARY=q1', 'q1'],
  ])('a %s boundary', (_how, type, boundary) => {
    const read = multipartMethodParams(multipart([['_method', 'PUT']], boundary), type)!;
    expect(read.methods).toEqual(['PUT']);
  });

  test('a field name spelled as PHP registers it, unquoted, counts', () => {
    const body = Buffer.from(
      '--b\r\nContent-Disposition: form-data; name=.method\r\n\r\nPATCH\r\n--b--\r\n',
    );
    expect(multipartMethodParams(body, 'multipart/form-data; boundary=b')!.methods).toEqual([
      'PATCH',
    ]);
  });

  test('a file part named _method is a file, not a method', () => {
    const body = Buffer.from(
      '--b\r\nContent-Disposition: form-data; name="_method"; filename="m.txt"\r\n\r\nDELETE\r\n--b--\r\n',
    );
    const read = multipartMethodParams(body, 'multipart/form-data; boundary=b')!;
    expect(read.methods).toEqual([]);
  });

  test('the boundary string inside a part (not at a line start) does not split it', () => {
    const body = multipart([
      ['note', 'see --proxy-test-boundary here'],
      ['_method', 'DELETE'],
    ]);
    const read = multipartMethodParams(body, TYPE)!;
    expect(read.methods).toEqual(['DELETE']);
    expect(read.without.toString()).toContain('see --proxy-test-boundary here');
  });

  test.each([
    ['no boundary parameter', multipart([['_method', 'DELETE']]), 'multipart/form-data'],
    [
      'a boundary over 70 characters',
      multipart([['a', '1']], 'x'.repeat(71)),
      `multipart/form-data; boundary=${'x'.repeat(71)}`,
    ],
    [
      'no closing delimiter',
      Buffer.from(
        '--proxy-test-boundary\r\nContent-Disposition: form-data; name="_method"\r\n\r\nDELETE\r\n',
      ),
      TYPE,
    ],
    [
      'a part without a blank line after its headers',
      Buffer.from(
        '--proxy-test-boundary\r\nContent-Disposition: form-data; name="_method"\r\nDELETE\r\n--proxy-test-boundary--\r\n',
      ),
      TYPE,
    ],
    ['another boundary than the header says', multipart([['_method', 'DELETE']], 'other'), TYPE],
    ['an empty body', Buffer.alloc(0), TYPE],
  ])('%s: unreadable (undefined), so the edge refuses it', (_what, body, type) => {
    expect(multipartMethodParams(body, type)).toBeUndefined();
  });
});

describe('which bodies are read', () => {
  test.each([
    ['application/x-www-form-urlencoded', 'form'],
    ['Application/X-WWW-Form-Urlencoded; charset=utf-8', 'form'],
    ['multipart/form-data; boundary=x', 'multipart'],
    ['application/json', 'json'],
    ['application/vnd.api+json', 'json'],
    ['text/plain', undefined],
    ['application/octet-stream', undefined],
    [undefined, undefined],
  ])('%s → %s', (type, kind) => {
    expect(methodBodyKind(type)).toBe(kind);
  });
});
