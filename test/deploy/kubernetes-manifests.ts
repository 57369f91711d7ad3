// Reads config/kubernetes/ as kubectl would, without a cluster: the YAML documents of a file, the
// kustomization's resources, the set `kubectl kustomize` renders (when kubectl is installed: it
// carries kustomize), and what the Kubernetes API schemas say of each manifest
// (kubernetes-schema-check.mjs). Also the disruption controller's arithmetic, for the PDB's promise.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import ts from 'typescript';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { REPO_ROOT } from './docker-build-inputs';

export const KUBERNETES_DIR = path.join(REPO_ROOT, 'config/kubernetes');

export interface Manifest {
  readonly apiVersion: string;
  readonly kind: string;
  readonly metadata: {
    readonly name: string;
    readonly labels?: Record<string, string>;
    readonly annotations?: Record<string, string>;
  };
  readonly spec?: Record<string, unknown>;
  readonly data?: Record<string, string>;
}

/** Every YAML document in a file under config/kubernetes/. */
export function documentsOf(relativeFile: string): Manifest[] {
  const text = fs.readFileSync(path.join(KUBERNETES_DIR, relativeFile), 'utf8');
  return parseAllDocuments(text).map((doc) => {
    if (doc.errors.length > 0) throw new Error(`${relativeFile}: ${doc.errors[0]!.message}`);
    return doc.toJS() as Manifest;
  });
}

export interface Kustomization {
  readonly kind: 'Kustomization' | 'Component';
  readonly resources?: string[];
  readonly components?: string[];
  readonly patches?: { readonly path: string }[];
}

export function kustomizationOf(relativeDir = '.'): Kustomization {
  const file = path.join(KUBERNETES_DIR, relativeDir, 'kustomization.yaml');
  return parseYaml(fs.readFileSync(file, 'utf8')) as Kustomization;
}

/** The manifests of a kustomization's resource files (paths relative to config/kubernetes/). */
export function resourcesOf(relativeDir = '.'): Manifest[] {
  return (kustomizationOf(relativeDir).resources ?? []).flatMap((file) =>
    documentsOf(path.join(relativeDir, file)),
  );
}

/** The kustomization's commented-out `components:` block, switched on: what its comment tells a person to do. */
export function withComponentsOn(kustomization: string): string {
  return kustomization.replace(/^# (components:)$/m, '$1').replace(/^# {3}(- .+)$/gm, '  $1');
}

/** `kubectl` when it is on PATH (it renders kustomizations offline), else undefined. */
export const KUBECTL = ['/usr/bin/kubectl', '/usr/local/bin/kubectl'].find((file) =>
  fs.existsSync(file),
);

/** `kubectl kustomize` of config/kubernetes/, as it is or with its components switched on. */
export function render(options: { components: boolean }): Manifest[] {
  if (!KUBECTL) throw new Error('kubectl is not installed');
  let dir = KUBERNETES_DIR;
  if (options.components) {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-kustomize-'));
    fs.cpSync(KUBERNETES_DIR, dir, { recursive: true });
    const file = path.join(dir, 'kustomization.yaml');
    fs.writeFileSync(file, withComponentsOn(fs.readFileSync(file, 'utf8')));
  }
  try {
    const text = execFileSync(KUBECTL, ['kustomize', dir], { encoding: 'utf8' });
    return parseAllDocuments(text).map((doc) => doc.toJS() as Manifest);
  } finally {
    if (dir !== KUBERNETES_DIR) fs.rmSync(dir, { recursive: true, force: true });
  }
}

export type SchemaVerdict = { readonly errors: string[] } | { readonly schema: false };

/** Each manifest checked against the Kubernetes API schemas, in one child process. */
export function checkSchemas(manifests: readonly Manifest[]): SchemaVerdict[] {
  const result = spawnSync(
    process.execPath,
    [path.join(__dirname, 'kubernetes-schema-check.mjs')],
    {
      cwd: REPO_ROOT,
      input: JSON.stringify(manifests),
      encoding: 'utf8',
    },
  );
  if (result.status !== 0) throw new Error(`schema check failed: ${result.stderr}`);
  return JSON.parse(result.stdout) as SchemaVerdict[];
}

export interface Budget {
  readonly minAvailable?: number;
  readonly maxUnavailable?: number;
}

/**
 * How many more pods the eviction API lets go, as the disruption controller counts it (integer
 * budgets): the healthy pods above the number that must stay healthy.
 */
export function disruptionsAllowed(budget: Budget, expected: number, healthy: number): number {
  const desiredHealthy =
    budget.minAvailable !== undefined
      ? budget.minAvailable
      : Math.max(0, expected - (budget.maxUnavailable ?? 0));
  return Math.max(0, healthy - desiredHealthy);
}

/**
 * Field names the API does not know, which the schemas let through (they do not forbid unknown
 * properties; the API server's strict field validation does). Each manifest is compiled as an object
 * literal typed with kubernetes-models' declarations, whose excess-property check names such a field.
 * One list of messages per manifest; empty when every field is known. No model: no check.
 */
export function unknownFields(manifests: readonly Manifest[]): string[][] {
  const file = path.join(__dirname, '__manifests__.ts');
  const source = manifests
    .map(
      (manifest, i) =>
        `import type { I${manifest.kind} as T${i} } from 'kubernetes-models/${manifest.apiVersion}/${manifest.kind}';\n` +
        `export const m${i}: T${i} = ${JSON.stringify(manifest)};`,
    )
    .join('\n');
  const options: ts.CompilerOptions = {
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: [],
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
  };
  const host = ts.createCompilerHost(options);
  const { getSourceFile, fileExists, readFile } = host;
  host.getSourceFile = (name, language, ...rest) =>
    name === file
      ? ts.createSourceFile(name, source, language)
      : getSourceFile.call(host, name, language, ...rest);
  host.fileExists = (name) => name === file || fileExists.call(host, name);
  host.readFile = (name) => (name === file ? source : readFile.call(host, name));
  const program = ts.createProgram([file], options, host);
  const found: string[][] = manifests.map(() => []);
  for (const diagnostic of ts.getPreEmitDiagnostics(program, program.getSourceFile(file))) {
    const line = diagnostic.file!.getLineAndCharacterOfPosition(diagnostic.start ?? 0).line;
    const text = ts.flattenDiagnosticMessageText(diagnostic.messageText, ' ');
    // A kind without a model (a custom resource) has no declarations to check against.
    if (diagnostic.code === 2307) continue;
    found[Math.floor(line / 2)]!.push(text);
  }
  return found;
}
