// github-action-benchmark v1.22.0's own extractor on a results file, as the action runs it:
//   node gab_extract.cjs RESULTS.json  ->  JSON list of {name, value, unit, range, extra}
// The vendored src/extract.ts is transpiled (types stripped) and its extractResult called with
// tool 'pytest'. The commit comes from a push event payload, as on a GitHub Actions push.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const ts = require('typescript');

const results = path.resolve(process.argv[2]);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'gab-'));
const event = path.join(tmp, 'event.json');
fs.writeFileSync(event, JSON.stringify({ head_commit: { id: '0'.repeat(40), message: 'accelbench check', url: 'about:blank', author: {}, committer: {} } }));
process.env.GITHUB_EVENT_PATH = event;

const src = fs.readFileSync(path.join(__dirname, 'vendor', 'github-action-benchmark', 'extract.ts'), 'utf8');
const js = ts.transpileModule(src, { compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2019, esModuleInterop: true } }).outputText;
const mod = path.join(__dirname, '.extract.transpiled.cjs'); // beside node_modules, so its requires resolve
fs.writeFileSync(mod, js);
const { extractResult } = require(mod);

extractResult({ tool: 'pytest', outputFilePath: results, githubToken: undefined, ref: undefined, goForcePackageSuffix: false })
  .then((b) => process.stdout.write(JSON.stringify(b.benches)))
  .catch((e) => { process.stderr.write(String(e && e.message || e) + '\n'); process.exit(1); });
