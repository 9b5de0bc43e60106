/**
 * The documentation holds together: the README stays one screen that points into docs/, and every
 * relative link (and its #anchor) in the README and docs/ leads somewhere.
 */
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../src/paths';

const DOCS_DIR = path.join(REPO_ROOT, 'docs');
const MARKDOWN = [
  path.join(REPO_ROOT, 'README.md'),
  path.join(REPO_ROOT, 'scripts', 'openstack', 'README.md'),
  ...fs.readdirSync(DOCS_DIR).filter((name) => name.endsWith('.md')).map((name) => path.join(DOCS_DIR, name)),
];

/** Markdown outside fenced code blocks: links in code are examples, not links. */
function prose(text: string): string {
  return text.split(/^```.*$/m).filter((_, i) => i % 2 === 0).join('\n');
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens. */
function headingAnchor(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
}

function anchorsOf(file: string): Set<string> {
  const headings = prose(fs.readFileSync(file, 'utf8')).match(/^#{1,6} .*$/gm) ?? [];
  return new Set(headings.map((h) => headingAnchor(h.replace(/^#+ /, ''))));
}

function relativeLinks(file: string): string[] {
  const links = [...prose(fs.readFileSync(file, 'utf8')).matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]);
  return links.filter((link) => !/^[a-z]+:/i.test(link));
}

describe('documentation', () => {
  it('derives anchors as GitHub does', () => {
    expect(headingAnchor('When hosts fail: the host monitor and healing')).toBe('when-hosts-fail-the-host-monitor-and-healing');
    expect(headingAnchor('Accounting: `GET /v1/usage`')).toBe('accounting-get-v1usage');
  });

  it('keeps the README to one screen that links into docs/', () => {
    const readme = fs.readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');
    expect(readme.split('\n').length).toBeLessThanOrEqual(150);
    const linked = new Set(relativeLinks(path.join(REPO_ROOT, 'README.md')).map((link) => link.split('#')[0]));
    const docs = fs.readdirSync(DOCS_DIR).filter((name) => name.endsWith('.md')).map((name) => `docs/${name}`);
    expect(docs.filter((doc) => !linked.has(doc))).toEqual([]);
  });

  it('has no relative link to a missing file or heading', () => {
    const broken: string[] = [];
    for (const file of MARKDOWN) {
      for (const link of relativeLinks(file)) {
        const [target, anchor] = link.split('#');
        const resolved = target ? path.resolve(path.dirname(file), target) : file;
        if (!fs.existsSync(resolved)) broken.push(`${path.relative(REPO_ROOT, file)}: ${link} (no such file)`);
        else if (anchor && resolved.endsWith('.md') && !anchorsOf(resolved).has(anchor)) broken.push(`${path.relative(REPO_ROOT, file)}: ${link} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
  });
});
