// A database URL as it may be shown: in a log line, a startup error, `check`'s summary.

/** postgres://user:***@host/db: the password never reaches a terminal or a CI log. */
export function maskPassword(url: string): string {
  let masked = url;
  try {
    const parsed = new URL(url);
    if (parsed.password) {
      parsed.password = '***';
      masked = parsed.toString();
    }
  } catch {
    // Not a URL (a keyword/value connection string): fall through to the pattern below.
  }
  return masked.replace(/(password=)[^&\s]*/gi, '$1***');
}
