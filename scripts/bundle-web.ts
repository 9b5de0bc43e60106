/**
 * Builds the calendar page into dist/web: one bundled, minified script (Preact and our code: no CDN,
 * the page works offline), its stylesheet and index.html. Type-checking is `tsc -p web` (npm run lint).
 */
import fs from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';
import { REPO_ROOT } from '../src/paths';

async function main(): Promise<void> {
  const source = path.join(REPO_ROOT, 'web');
  const out = path.join(REPO_ROOT, 'dist', 'web');
  fs.rmSync(out, { recursive: true, force: true });
  fs.mkdirSync(out, { recursive: true });
  const result = await build({
    entryPoints: [path.join(source, 'src', 'main.tsx')],
    outfile: path.join(out, 'calendar.js'),
    bundle: true,
    minify: true,
    sourcemap: true,
    format: 'esm',
    target: 'es2022',
    jsx: 'automatic',
    jsxImportSource: 'preact',
    tsconfig: path.join(source, 'tsconfig.json'),
    metafile: true,
    logLevel: 'warning',
  });
  for (const file of ['index.html', 'calendar.css']) fs.copyFileSync(path.join(source, file), path.join(out, file));
  const bytes = Object.values(result.metafile.outputs).reduce((sum, o) => sum + (o.bytes ?? 0), 0);
  console.log(`calendar page: ${path.relative(REPO_ROOT, out)} (${(bytes / 1024).toFixed(0)} KiB with source map)`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
