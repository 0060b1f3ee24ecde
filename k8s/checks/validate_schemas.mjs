// Validates rendered Kubernetes objects against the Kubernetes OpenAPI schemas, offline, with the
// validators of the npm packages kubernetes-models (Kubernetes 1.27 schemas) and
// @kubernetes-models/prometheus-operator (ServiceMonitor). Types, enums and required fields are
// checked; unknown fields are not (the upstream schemas allow them).
//
//   npm install --prefix /tmp/k8s-models kubernetes-models@5.1.0 \
//     @kubernetes-models/prometheus-operator
//   python3 k8s/checks/check_rendered.py --json docs.json manifests.yaml
//   node k8s/checks/validate_schemas.mjs /tmp/k8s-models/node_modules docs.json
//
// Prints one line per invalid object and exits 1 if any; an apiVersion/kind without a model is
// an error too, so that nothing passes unchecked.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, docsPath] = process.argv.slice(2);
if (!modules || !docsPath) {
  console.error("usage: node validate_schemas.mjs NODE_MODULES_DIR DOCS.json");
  process.exit(2);
}
const packages = { "monitoring.coreos.com": "@kubernetes-models/prometheus-operator" };

const docs = JSON.parse(readFileSync(docsPath, "utf8"));
let bad = 0;
for (const [i, doc] of docs.entries()) {
  const name = doc.metadata?.name ?? doc.metadata?.generateName;
  const where = `document ${i} ${doc.apiVersion} ${doc.kind} ${name}`;
  const group = doc.apiVersion.includes("/") ? doc.apiVersion.split("/")[0] : "";
  const pkg = packages[group] ?? "kubernetes-models";
  const file = join(modules, pkg, doc.apiVersion, `${doc.kind}.js`);
  let Model;
  try {
    Model = (await import(pathToFileURL(file).href))[doc.kind];
  } catch (e) {
    console.log(`${where}: no schema (${file}): ${e.message}`);
    bad++;
    continue;
  }
  try {
    new Model(doc).validate();
  } catch (e) {
    console.log(`${where}: ${e.message}`);
    bad++;
  }
}
console.log(`${docs.length} documents validated, ${bad} invalid`);
process.exit(bad ? 1 : 0);
