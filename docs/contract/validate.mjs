// Validates the AsyncAPI document with the AsyncAPI project's own parser
// (@asyncapi/parser: the specification's JSON Schema and its Spectral
// rules), resolving the relative $refs to ./schemas. Exits 1 on any error
// or warning, printing each with its path in the document.
//
//   node validate.mjs [asyncapi.yaml]
import path from 'node:path';
import { Parser, fromFile, DiagnosticSeverity } from '@asyncapi/parser';

const file = path.resolve(process.argv[2] ?? 'asyncapi.yaml');
const parser = new Parser();
const { document, diagnostics } = await fromFile(parser, file).parse();
const severities = ['error', 'warning', 'info', 'hint'];
let failed = !document;
for (const d of diagnostics) {
  const severity = severities[d.severity] ?? String(d.severity);
  if (d.severity <= DiagnosticSeverity.Warning) failed = true;
  console.error(`${path.basename(file)}: ${severity}: ${d.code}: ${d.message} at ${d.path.join('.') || '(root)'}`);
}
if (failed) {
  console.error(`${path.basename(file)}: not a valid AsyncAPI document`);
  process.exit(1);
}
const channels = document.channels().all().map((c) => c.address() ?? c.id());
const messages = document.allMessages().all().length;
console.log(`${path.basename(file)}: valid AsyncAPI ${document.version()}: ${channels.length} channels (${channels.join(', ')}), ${messages} messages`);
