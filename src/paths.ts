import fs from 'node:fs';
import path from 'node:path';

/** The checkout's root (the folder holding package.json), whether running from src/ or dist/. */
function findRepoRoot(start: string): string {
  for (let dir = start; ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'package.json')) && fs.existsSync(path.join(dir, 'workflows'))) return dir;
    if (path.dirname(dir) === dir) throw new Error(`cannot find the leasekeeper checkout above ${start}`);
  }
}

export const REPO_ROOT = findRepoRoot(__dirname);
