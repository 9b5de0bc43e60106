/**
 * Callers' text (lease names, project and user ids, reasons) shown in the Temporal Web UI, which
 * renders summaries and details as Markdown: every ASCII punctuation character is backslash-escaped
 * (CommonMark's escapes, which also stop HTML tags and entities) and line breaks become spaces, so
 * that a name can add no link, image, HTML or table row. Pure: used by workflow code too.
 */
export function markdownText(text: string): string {
  return text.replace(/[\r\n\u2028\u2029]+/g, ' ').replace(/[!-/:-@[-`{-~]/g, (c) => `\\${c}`);
}
