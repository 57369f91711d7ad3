// What a long call's handle looks like from outside (protected/protocol.ts, rest/prefer.ts): a token that
// carries an unguessable secret and the key, read back only when well formed; and the Prefer
// header as respond-async reads it (RFC 7240).
import { handleToken, readHandleToken } from '../../src/protected/protocol';
import { preferredAsync } from '../../src/rest/prefer';
import type { Handle } from '../../src/store/handles';

const handle = (secret: string): Handle => ({
  secret,
  createdAt: 0,
  expiresAt: 0,
  cancelRequested: false,
});

describe('handle tokens', () => {
  const secret = 'abcdefghijklmnopqrstuvwx';

  it('carry the secret and the key, and read back to both', () => {
    for (const key of ['k', 'order-42', '"quoted"', '~'.repeat(255), 'a/b?c=d#e']) {
      const token = handleToken(handle(secret), key);
      expect(token).toMatch(/^[A-Za-z0-9_-]+$/);
      expect(readHandleToken(token)).toEqual({ secret, key });
    }
  });

  it('read nothing from what no handle could have given', () => {
    const token = handleToken(handle(secret), 'order-42');
    expect(readHandleToken('')).toBeUndefined();
    expect(readHandleToken(secret)).toBeUndefined(); // no key
    expect(readHandleToken(`${secret.slice(1)}!${token.slice(24)}`)).toBeUndefined();
    expect(readHandleToken(`${token}=`)).toBeUndefined();
    // A key outside visible ASCII, or longer than any key, is no key.
    expect(readHandleToken(secret + Buffer.from('a b').toString('base64url'))).toBeUndefined();
    expect(readHandleToken(secret + Buffer.from('k'.repeat(256)).toString('base64url'))).toBe(
      undefined,
    );
  });
});

describe('Prefer: respond-async', () => {
  it('is read among other preferences, in any case, with its wait', () => {
    expect(preferredAsync('respond-async')).toEqual({ waitSeconds: undefined });
    expect(preferredAsync('Respond-Async, wait=10')).toEqual({ waitSeconds: 10 });
    expect(preferredAsync(['return=minimal', 'wait=5;x=1, respond-async'])).toEqual({
      waitSeconds: 5,
    });
    expect(preferredAsync('respond-async; foo=bar, wait="7"')).toEqual({ waitSeconds: 7 });
  });

  it('takes the first of a repeated wait, and ignores one that is not whole seconds', () => {
    expect(preferredAsync('wait=3, respond-async, wait=9')).toEqual({ waitSeconds: 3 });
    expect(preferredAsync('respond-async, wait=soon')).toEqual({ waitSeconds: undefined });
    expect(preferredAsync('respond-async, wait=-1')).toEqual({ waitSeconds: undefined });
  });

  it('is absent without the preference', () => {
    expect(preferredAsync(undefined)).toBeUndefined();
    expect(preferredAsync('wait=10')).toBeUndefined();
    expect(preferredAsync('respond-asynchronously')).toBeUndefined();
    expect(preferredAsync('return=representation')).toBeUndefined();
  });
});
