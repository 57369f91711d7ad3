// Validates Kubernetes manifests against the API's schemas (kubernetes-models: validators generated
// from the Kubernetes OpenAPI definitions), for kubernetes.test.ts. A process of its own because
// kubernetes-models is an ES module, which jest's CommonJS module system cannot load.
// stdin: a JSON array of manifests. stdout: a JSON array, one entry per manifest: `{ errors }` (an
// empty list when it is valid), or `{ schema: false }` when there is no model for its apiVersion and
// kind (a custom resource such as the prometheus-operator's ServiceMonitor).
import process from 'node:process';
import { text } from 'node:stream/consumers';

/** kubernetes-models/v1/ConfigMap, kubernetes-models/apps/v1/Deployment, … */
async function modelOf(apiVersion, kind) {
  try {
    return (await import(`kubernetes-models/${apiVersion}/${kind}`))[kind];
  } catch (error) {
    if (error.code === 'ERR_PACKAGE_PATH_NOT_EXPORTED' || error.code === 'ERR_MODULE_NOT_FOUND')
      return undefined;
    throw error;
  }
}

const results = [];
for (const manifest of JSON.parse(await text(process.stdin))) {
  const Model = await modelOf(manifest.apiVersion, manifest.kind);
  if (Model === undefined) {
    results.push({ schema: false });
    continue;
  }
  try {
    new Model(manifest).validate();
    results.push({ errors: [] });
  } catch (error) {
    if (!Array.isArray(error.errors)) throw error;
    results.push({
      errors: error.errors.map((each) => `${each.instancePath || '/'} ${each.message}`),
    });
  }
}
process.stdout.write(JSON.stringify(results));
