/**
 * The layer rule: imports run one way, top to bottom (README, "Architecture"). A file may import
 * its own folder and the layers its row lists; anything else is an upward or sideways arrow and
 * fails the lint. Tests, benchmarks and scripts stand outside the layers (they use dev-stack/).
 */
const fs = require('node:fs');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..');

/** Process-wide helpers every layer above the domain may use. */
const PLATFORM = ['src/config.ts', 'src/log.ts', 'src/paths.ts', 'src/temporal.ts'];

/** Each layer (a folder, or a file), with what it may import (folders, files, or patterns of files); `typesOnly`: allowed as `import type` only. */
const LAYERS = [
  { layer: 'src/api', may: [/^workflows\/[^/]+\/messages\.ts$/, 'src/outbox', 'src/resources', 'src/power', 'src/policy', 'src/notifications', 'src/db', 'src/openstack', 'src/domain', ...PLATFORM] },
  // The migration from Blazar, beside the API: it writes through the stores and starts lease workflows as the API does.
  // It takes a lease only as the API would: by the API's own rules (lease-schemas, input-check, auth's identity rule).
  { layer: 'src/import', may: [/^workflows\/[^/]+\/messages\.ts$/, 'src/api/lease-commands.ts', 'src/api/lease-schemas.ts', 'src/api/input-check.ts', 'src/api/auth.ts', 'src/outbox', 'src/resources', 'src/db', 'src/domain', ...PLATFORM] },
 // Owed lease workflow starts (the API's admissions): the API starts them, the API and the worker sweep.
  { layer: 'src/outbox', may: [/^workflows\/[^/]+\/messages\.ts$/, 'src/db', 'src/domain', ...PLATFORM] },
  { layer: 'worker', may: ['activities', 'workflows', 'src/outbox', 'src/resources', 'src/power', 'src/policy', 'src/notifications', 'src/db', 'src/openstack', 'src/domain', ...PLATFORM] },
  { layer: 'workflows', may: ['src/domain'], typesOnly: ['activities'] },
  { layer: 'activities', may: ['src/resources', 'src/power', 'src/policy', 'src/notifications', 'src/db', 'src/openstack', 'src/domain', ...PLATFORM] },
  { layer: 'src/resources', may: ['src/power', 'src/db', 'src/openstack', 'src/domain', ...PLATFORM] },
  // The power drivers (ipmitool, the operator's programs, Ironic through its client): a client layer over src/openstack.
  { layer: 'src/power', may: ['src/openstack', 'src/domain', ...PLATFORM] },
  // The usage policy (rules, Blazar's external filter), beside the resource types: the activities and the API use it.
  { layer: 'src/policy', may: ['src/db', 'src/domain', ...PLATFORM] },
  // Notices' delivery (webhooks, oslo.messaging), beside the resource types: the activities deliver, the API keeps projects' webhooks.
  { layer: 'src/notifications', may: ['src/db', 'src/domain', ...PLATFORM] },
  { layer: 'src/db', may: ['src/domain', ...PLATFORM] },
  { layer: 'src/openstack', may: ['src/domain', ...PLATFORM] },
  { layer: 'src/temporal.ts', may: ['src/domain', 'src/config.ts'] },
  { layer: 'src/log.ts', may: ['src/config.ts'] },
  { layer: 'src/config.ts', may: ['src/paths.ts'] },
  { layer: 'src/paths.ts', may: [] },
  { layer: 'src/domain', may: [] },
  // The local stack (npm start, the tests' and benchmarks' servers, the scripts'): above everything; nothing in src/ imports it.
  { layer: 'dev-stack', may: ['src', 'worker', 'activities', 'workflows'] },
];

const within = (file, place) => (place instanceof RegExp ? place.test(file) : file === place || file.startsWith(place.endsWith('.ts') ? place : `${place}/`));
/** The file an import names, relative to the repository: `x.ts`, or a folder's `index.ts`. */
function resolved(absolute) {
  const file = [absolute, `${absolute}.ts`, path.join(absolute, 'index.ts')].find((candidate) => candidate.endsWith('.ts') && fs.existsSync(candidate)) ?? absolute;
  return path.relative(ROOT, file).split(path.sep).join('/');
}
const layerOf = (file) => LAYERS.find(({ layer }) => within(file, layer));

const noUpwardImport = {
  meta: {
    type: 'problem',
    docs: { description: 'imports run one way through the layers: api → workflow messages; worker → activities → resources → openstack clients and db stores → domain' },
    schema: [],
  },
  create(context) {
    const importer = path.relative(ROOT, context.filename).split(path.sep).join('/');
    const own = layerOf(importer);
    if (!own) return {};
    function check(node) {
      const source = node.source?.value;
      if (typeof source !== 'string' || !source.startsWith('.')) return;
      const target = resolved(path.resolve(path.dirname(context.filename), source));
      const theirs = layerOf(target);
      if (!theirs || theirs === own) return;
      const typeOnly = node.importKind === 'type' || node.exportKind === 'type';
      const allowed = own.may.some((place) => within(target, place)) || (typeOnly && (own.typesOnly ?? []).some((place) => within(target, place)));
      if (!allowed) context.report({ node: node.source, message: `${own.layer} may not import ${theirs.layer} (${source}): layers import downwards only (see README, Architecture)` });
    }
    return { ImportDeclaration: check, ExportNamedDeclaration: check, ExportAllDeclaration: check };
  },
};

module.exports = { rules: { 'no-upward-import': noUpwardImport }, LAYERS };
