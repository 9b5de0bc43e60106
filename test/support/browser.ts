/**
 * Debian's Chromium, headless, driven by playwright-core (no browser download here), and the folder
 * where browser tests leave their screenshots (test-artifacts/, printed so that CI shows where).
 */
import fs from 'node:fs';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { REPO_ROOT } from '../../src/paths';

export const CHROMIUM = process.env.LK_CHROMIUM ?? '/usr/bin/chromium';

export function launchChromium(): Promise<Browser> {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: npm run setup installs Debian's (apt-get install chromium)`);
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-dev-shm-usage'],
  });
}

/** A fresh folder for one test file's artefacts. */
export function artefactDir(name: string): string {
  const dir = path.join(REPO_ROOT, 'test-artifacts', name);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

/** The axe-core engine's source, injected into a page for an accessibility check. */
export const AXE_SOURCE = () => fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
