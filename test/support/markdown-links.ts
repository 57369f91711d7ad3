// The links of a markdown page as a reader follows them: `[x](y)` outside fenced code and code spans.
// Shared by the docs-links test (every link resolves in the repo) and the package test (every link
// of a packed README resolves in the package).

/** The text outside fenced code blocks and code spans, where a `[x](y)` is a link. */
export function prose(markdown: string): string {
  return markdown.replace(/^```[^\n]*\n[\s\S]*?^```[^\n]*$/gm, '').replace(/`[^`\n]*`/g, '');
}

/** Every link target of the page, as written: `path#anchor`, `#anchor` or `https://…`. */
export function linkTargets(markdown: string): string[] {
  return [...prose(markdown).matchAll(/\]\(([^)\s]+)\)/g)].map((match) => match[1]!);
}

/** True for a target with a scheme (https:, mailto: …), which no file of ours resolves. */
export function isAbsoluteLink(target: string): boolean {
  return /^[a-z][a-z0-9+.-]*:/i.test(target);
}
