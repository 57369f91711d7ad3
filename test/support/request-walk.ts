// How far a reader has to travel to follow one request through the code: the files they open, how
// often they switch files, and how often they climb back up into a file they came down from. A
// design target such as "at most 8 files, at most 4 climbs" needs a number that does not depend on
// who counts, so this walks the source statically with the TypeScript checker, the way a reader
// with go-to-definition would: it follows the value (the request, the scope), not every call.
//
// Why each rule is as it is:
// - Only calls the tracked value flows into are followed (as an argument, inside an object literal
//   argument, or as the receiver): a helper that gets `policy.key.header` is a detour the reader can
//   skip; one that gets the request is where the request goes next. A piece taken out of the request
//   (`request.req`, a destructured field) is no longer the request, so it is not followed either.
//   Local copies (`const derived = { ...request, policy }`, `const r = request`) are still the
//   request, under another name.
// - Only bodies declared in src/ (.ts, not .d.ts, not node_modules) are entered: the rest is the
//   platform, which the design does not control. Calls through an interface (`deps.store.claim`)
//   resolve to a signature without a body and stop there: the walk follows what the code says, not
//   which implementation happens to be plugged in at run time — unless the walk is told which
//   implementation to read (`implementations`), as a reader following one adapter would.
// - A function is expanded once: reading it a second time teaches nothing, but the reader still has
//   to jump to its file and back, so a repeat call is a stay in that file (and can be a climb).
// - Within an expression, calls are taken in the order they run (the arguments before the call that
//   gets them); an inline callback is read after the call it is passed to (which is what runs it),
//   and as part of the enclosing function — its file is the one being read. Other nested functions
//   are read when called, not where they are written.
// - A climb is a call into a file that is still open further up the call stack, with another file in
//   between: the reader went down from A into B and must now go back up into A while still in B.
//   That is the shape that makes a path hard to hold in one's head, so it is counted on its own.
import path from 'node:path';
import ts from 'typescript';

export interface WalkOptions {
  /** The repository (or fixture project) root: tsconfig.json and src/ live here. */
  root: string;
  /** The entry file, relative to root (e.g. 'src/protected/handle.ts'). */
  file: string;
  /** A function (or const arrow) name, or 'Class.method'. */
  fn: string;
  /** The tracked parameter; default: the first named 'request' or 'scope', else the 2nd. */
  param?: string;
  /**
   * Calls through these interfaces are followed into one implementation: interface name →
   * `file#name`, where `name` is a const holding an object literal, or a function returning one
   * (e.g. `{ ProtocolAdapter: 'src/rest/adapter.ts#REST' }`). How one adapter is walked.
   */
  implementations?: Record<string, string>;
}

/** One followed call, in walk order. */
export interface WalkStep {
  file: string;
  fn: string;
  /** 0 for the entry, 1 for what it calls, and so on. */
  depth: number;
  /** Already expanded earlier: a stay in its file, not walked again. */
  repeat: boolean;
  /** The call went back up into a file still open further up the stack. */
  climb: boolean;
}

export interface WalkReport {
  entry: string;
  param: string;
  /** Distinct files in the walk, the entry file included. */
  filesEntered: number;
  /** Maximal runs of one file in the sequence of files the walk is in. */
  stays: number;
  /** Calls into a file already on the call stack with another file in between. */
  climbs: number;
  /** Moves (call or return) into a file that was entered before and left. */
  returnsToLeftFile: number;
  /** The files, in the order first entered. */
  files: string[];
  /** `file:function` of each followed call (the entry first). */
  trace: string[];
  steps: WalkStep[];
  /** The file of each stay, in order. */
  sequence: string[];
}

type Body = ts.FunctionLikeDeclaration & { body: ts.ConciseBody };

interface Frame {
  file: string;
  tracked: Set<ts.Symbol>;
  thisTracked: boolean;
}

const programs = new Map<string, { program: ts.Program; checker: ts.TypeChecker }>();

/** One program per root: the two real entries share it. */
function programOf(root: string): { program: ts.Program; checker: ts.TypeChecker } {
  const known = programs.get(root);
  if (known) return known;
  const configPath = path.join(root, 'tsconfig.json');
  const read = ts.readConfigFile(configPath, (f) => ts.sys.readFile(f));
  if (read.error) throw new Error(ts.flattenDiagnosticMessageText(read.error.messageText, '\n'));
  const parsed = ts.parseJsonConfigFileContent(read.config, ts.sys, root);
  const program = ts.createProgram({
    rootNames: parsed.fileNames,
    options: { ...parsed.options, noEmit: true },
  });
  const made = { program, checker: program.getTypeChecker() };
  programs.set(root, made);
  return made;
}

const unwrap = (e: ts.Expression): ts.Expression => {
  while (
    ts.isParenthesizedExpression(e) ||
    ts.isAsExpression(e) ||
    ts.isNonNullExpression(e) ||
    ts.isSatisfiesExpression(e) ||
    ts.isTypeAssertionExpression(e)
  )
    e = e.expression;
  return e;
};

const isFunctionLiteral = (e: ts.Expression): e is ts.ArrowFunction | ts.FunctionExpression => {
  const u = unwrap(e);
  return ts.isArrowFunction(u) || ts.isFunctionExpression(u);
};

export function walkRequest(options: WalkOptions): WalkReport {
  const root = path.resolve(options.root);
  const src = path.join(root, 'src') + path.sep;
  const { program, checker } = programOf(root);
  const rel = (f: string) => path.relative(root, f).split(path.sep).join('/');

  const entrySource = program.getSourceFile(path.join(root, options.file));
  if (!entrySource) throw new Error(`${options.file} is not in the program of ${root}`);
  const entry = findFunction(entrySource, options.fn);
  if (!entry) throw new Error(`${options.file} has no function ${options.fn}`);
  const param = pickParam(entry, options.param);

  const expanded = new Set<ts.Node>();
  const stack: Frame[] = [];
  const sequence: string[] = [];
  const steps: WalkStep[] = [];
  let climbs = 0;

  const moveTo = (file: string) => {
    if (sequence[sequence.length - 1] !== file) sequence.push(file);
  };

  const symbolOf = (node: ts.Node): ts.Symbol | undefined => {
    let symbol = checker.getSymbolAtLocation(node);
    if (symbol && symbol.flags & ts.SymbolFlags.Alias) symbol = checker.getAliasedSymbol(symbol);
    return symbol;
  };

  /** The tracked value itself, under a tracked name or inside an object literal. */
  const isTracked = (expr: ts.Expression, frame: Frame): boolean => {
    const e = unwrap(expr);
    if (e.kind === ts.SyntaxKind.ThisKeyword) return frame.thisTracked;
    if (ts.isIdentifier(e)) {
      const symbol = checker.getSymbolAtLocation(e);
      return symbol !== undefined && frame.tracked.has(symbol);
    }
    if (ts.isObjectLiteralExpression(e))
      return e.properties.some((p) => {
        if (ts.isSpreadAssignment(p) || ts.isPropertyAssignment(p))
          return ts.isSpreadAssignment(p)
            ? isTracked(p.expression, frame)
            : ts.isIdentifier(unwrap(p.initializer)) && isTracked(p.initializer, frame);
        if (ts.isShorthandPropertyAssignment(p)) {
          const symbol = checker.getShorthandAssignmentValueSymbol(p);
          return symbol !== undefined && frame.tracked.has(symbol);
        }
        return false;
      });
    return false;
  };

  /** A body counts when it is declared in a .ts file of src/ (not .d.ts, not a package's). */
  const inSrc = (body: Body): boolean => {
    const file = body.getSourceFile();
    return (
      !file.isDeclarationFile &&
      file.fileName.startsWith(src) &&
      !file.fileName.split(/[\\/]/).includes('node_modules')
    );
  };

  /**
   * The bodies a callee resolves to in src/: usually one; a const that names other functions
   * (`const send = request.mcp ? forwardToolCall : forwardAndSettle`) gives each, in source order.
   */
  const calleesOf = (at: ts.Node, isNew: boolean, seen = new Set<ts.Symbol>()): Body[] => {
    const symbol = symbolOf(at);
    if (!symbol || seen.has(symbol)) return [];
    seen.add(symbol);
    for (const decl of symbol.declarations ?? []) {
      const bound = isNew ? undefined : implementationOf(decl);
      if (bound !== undefined) return bound;
      const body = isNew ? constructorOf(decl) : bodyOf(decl);
      if (body) return inSrc(body) ? [body] : [];
      if (!isNew && ts.isVariableDeclaration(decl) && decl.initializer && isConst(decl))
        return namedFunctions(decl.initializer).flatMap((n) => calleesOf(n, false, seen));
    }
    return [];
  };

  /** A member of an interface with a named implementation: that implementation's member. */
  const implementationOf = (decl: ts.Declaration): Body[] | undefined => {
    if (!ts.isMethodSignature(decl) && !ts.isPropertySignature(decl)) return undefined;
    const owner = decl.parent;
    if (!ts.isInterfaceDeclaration(owner)) return undefined;
    const where = options.implementations?.[owner.name.text];
    if (where === undefined || !ts.isIdentifier(decl.name)) return undefined;
    const [file, name] = where.split('#') as [string, string];
    const source = program.getSourceFile(path.join(root, file));
    const object = source && implementingObject(source, name);
    if (object === undefined)
      throw new Error(`${where} is no object literal of ${owner.name.text}`);
    const member = object.properties.find(
      (p) => p.name !== undefined && ts.isIdentifier(p.name) && p.name.text === decl.name.getText(),
    );
    if (member === undefined) return [];
    if (ts.isMethodDeclaration(member) && member.body) return [member as Body];
    if (ts.isPropertyAssignment(member)) {
      const init = unwrap(member.initializer);
      if (ts.isArrowFunction(init) || ts.isFunctionExpression(init)) return [init];
      return namedFunctions(init).flatMap((n) => calleesOf(n, false));
    }
    return [];
  };

  /** The root of `a.b.c` (the `a`), for a receiver. */
  const receiverRoot = (e: ts.Expression): ts.Expression => {
    let r = unwrap(e);
    while (ts.isPropertyAccessExpression(r) || ts.isElementAccessExpression(r))
      r = unwrap(r.expression);
    return r;
  };

  const visitCall = (call: ts.CallExpression | ts.NewExpression, frame: Frame, depth: number) => {
    const args = call.arguments ?? ts.factory.createNodeArray<ts.Expression>();
    // What runs first: the callee expression (receiver chain) and the plain arguments.
    walkNode(call.expression, frame, depth);
    for (const arg of args) if (!isFunctionLiteral(arg)) walkNode(arg, frame, depth);

    const callee = unwrap(call.expression);
    const at = ts.isPropertyAccessExpression(callee) ? callee.name : callee;
    for (const body of calleesOf(at, ts.isNewExpression(call))) {
      const receiver = ts.isPropertyAccessExpression(callee) ? callee.expression : undefined;
      const receiverTracked = receiver !== undefined && isTracked(receiver, frame);
      const rootTracked = receiver !== undefined && isTracked(receiverRoot(receiver), frame);
      const argTracked = args.map((a) => isTracked(a, frame));
      if (argTracked.some(Boolean) || receiverTracked || rootTracked) {
        const tracked = new Set<ts.Symbol>();
        body.parameters.forEach((p, i) => {
          if (p.dotDotDotToken || !ts.isIdentifier(p.name) || !argTracked[i]) return;
          const symbol = checker.getSymbolAtLocation(p.name);
          if (symbol) tracked.add(symbol);
        });
        enter(body, { tracked, thisTracked: receiverTracked }, depth + 1, frame);
      }
    }
    // An inline callback runs inside the call it is passed to; it is read as part of this function.
    for (const arg of args) if (isFunctionLiteral(arg)) walkBody(unwrap(arg) as Body, frame, depth);
  };

  const walkNode = (node: ts.Node, frame: Frame, depth: number): void => {
    if (ts.isCallExpression(node) || ts.isNewExpression(node)) return visitCall(node, frame, depth);
    // A nested function is read when it is called, not where it is written.
    if (ts.isFunctionLike(node) || ts.isClassLike(node)) return;
    ts.forEachChild(node, (child) => walkNode(child, frame, depth));
    // Aliases, once their initializer has been walked.
    if (ts.isVariableDeclaration(node) && ts.isIdentifier(node.name) && node.initializer) {
      if (isTracked(node.initializer, frame)) {
        const symbol = checker.getSymbolAtLocation(node.name);
        if (symbol) frame.tracked.add(symbol);
      }
    } else if (
      ts.isBinaryExpression(node) &&
      node.operatorToken.kind === ts.SyntaxKind.EqualsToken &&
      ts.isIdentifier(node.left) &&
      isTracked(node.right, frame)
    ) {
      const symbol = checker.getSymbolAtLocation(node.left);
      if (symbol) frame.tracked.add(symbol);
    }
  };

  const walkBody = (fn: Body, frame: Frame, depth: number) => {
    for (const p of fn.parameters) if (p.initializer) walkNode(p.initializer, frame, depth);
    walkNode(fn.body, frame, depth);
  };

  const enter = (
    fn: Body,
    partial: Omit<Frame, 'file'>,
    depth: number,
    caller: Frame | undefined,
  ) => {
    const file = rel(fn.getSourceFile().fileName);
    const repeat = expanded.has(fn);
    const climb =
      caller !== undefined && file !== caller.file && stack.some((f) => f.file === file);
    if (climb) climbs++;
    steps.push({ file, fn: nameOf(fn), depth, repeat, climb });
    moveTo(file);
    if (!repeat) {
      expanded.add(fn);
      const frame: Frame = { ...partial, file };
      stack.push(frame);
      walkBody(fn, frame, depth);
      stack.pop();
    }
    if (caller) moveTo(caller.file);
  };

  const tracked = new Set<ts.Symbol>();
  const paramSymbol = checker.getSymbolAtLocation(param.name);
  if (paramSymbol) tracked.add(paramSymbol);
  enter(entry, { tracked, thisTracked: false }, 0, undefined);

  const files = [...new Set(sequence)];
  return {
    entry: `${options.file}:${options.fn}`,
    param: param.name.getText(),
    filesEntered: files.length,
    stays: sequence.length,
    climbs,
    returnsToLeftFile: sequence.length - files.length,
    files,
    trace: steps.map((s) => `${s.file}:${s.fn}`),
    steps,
    sequence,
  };
}

/** The object literal a const holds, or that a function of that name returns. */
function implementingObject(
  source: ts.SourceFile,
  name: string,
): ts.ObjectLiteralExpression | undefined {
  let found: ts.ObjectLiteralExpression | undefined;
  const visit = (node: ts.Node): void => {
    if (found) return;
    if (ts.isVariableDeclaration(node) && node.name.getText() === name && node.initializer) {
      const init = unwrap(node.initializer);
      if (ts.isObjectLiteralExpression(init)) found = init;
    } else if (ts.isFunctionDeclaration(node) && node.name?.text === name && node.body) {
      for (const statement of node.body.statements)
        if (ts.isReturnStatement(statement) && statement.expression) {
          const returned = unwrap(statement.expression);
          if (ts.isObjectLiteralExpression(returned)) found = returned;
        }
    }
    if (!found) ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

const isConst = (decl: ts.VariableDeclaration): boolean =>
  ts.isVariableDeclarationList(decl.parent) && (decl.parent.flags & ts.NodeFlags.Const) !== 0;

/** The names a const's initializer may call: `f`, `a.f`, or either branch of `c ? f : g`. */
function namedFunctions(init: ts.Expression): ts.Node[] {
  const e = unwrap(init);
  if (ts.isConditionalExpression(e))
    return [...namedFunctions(e.whenTrue), ...namedFunctions(e.whenFalse)];
  if (ts.isIdentifier(e)) return [e];
  if (ts.isPropertyAccessExpression(e)) return [e.name];
  return [];
}

/** The body a declaration gives a call: a function, a method, or an arrow or function assigned. */
function bodyOf(decl: ts.Declaration): Body | undefined {
  if (
    (ts.isFunctionDeclaration(decl) ||
      ts.isMethodDeclaration(decl) ||
      ts.isFunctionExpression(decl)) &&
    decl.body
  )
    return decl as Body;
  if (
    (ts.isVariableDeclaration(decl) ||
      ts.isPropertyDeclaration(decl) ||
      ts.isPropertyAssignment(decl)) &&
    decl.initializer
  ) {
    const init = unwrap(decl.initializer);
    if (ts.isArrowFunction(init) || ts.isFunctionExpression(init)) return init;
  }
  return undefined;
}

function constructorOf(decl: ts.Declaration): Body | undefined {
  if (!ts.isClassDeclaration(decl) && !ts.isClassExpression(decl)) return undefined;
  const ctor = decl.members.find(ts.isConstructorDeclaration);
  return ctor?.body ? (ctor as Body) : undefined;
}

/** `name`, `Class.method`, `Class.constructor`, or the const an arrow is assigned to. */
function nameOf(fn: Body): string {
  const named = (n: ts.Node | undefined) =>
    n && (ts.isIdentifier(n) || ts.isStringLiteral(n) || ts.isPrivateIdentifier(n))
      ? n.text
      : undefined;
  const owner = (n: ts.Node) => {
    const parent = n.parent;
    if (ts.isClassLike(parent)) return named(parent.name) ?? '(class)';
    if (ts.isObjectLiteralExpression(parent) && ts.isVariableDeclaration(parent.parent))
      return named(parent.parent.name) ?? '(object)';
    return undefined;
  };
  if (ts.isConstructorDeclaration(fn)) return `${owner(fn)}.constructor`;
  if (ts.isMethodDeclaration(fn)) {
    const o = owner(fn);
    return o ? `${o}.${named(fn.name)}` : (named(fn.name) ?? '(method)');
  }
  if (ts.isFunctionDeclaration(fn)) return named(fn.name) ?? '(default)';
  const holder = fn.parent;
  if (ts.isVariableDeclaration(holder)) return named(holder.name) ?? '(arrow)';
  if (ts.isPropertyDeclaration(holder) || ts.isPropertyAssignment(holder)) {
    const o = owner(holder);
    return o ? `${o}.${named(holder.name)}` : (named(holder.name) ?? '(arrow)');
  }
  return named(fn.name) ?? '(anonymous)';
}

function findFunction(source: ts.SourceFile, name: string): Body | undefined {
  const [first, member] = name.split('.');
  for (const statement of source.statements) {
    if (member === undefined) {
      if (ts.isFunctionDeclaration(statement) && statement.name?.text === first && statement.body)
        return statement as Body;
      if (ts.isVariableStatement(statement))
        for (const decl of statement.declarationList.declarations)
          if (ts.isIdentifier(decl.name) && decl.name.text === first) {
            const body = bodyOf(decl);
            if (body) return body;
          }
    } else if (ts.isClassDeclaration(statement) && statement.name?.text === first) {
      if (member === 'constructor') return constructorOf(statement);
      for (const m of statement.members)
        if (m.name && ts.isIdentifier(m.name) && m.name.text === member) {
          const body = bodyOf(m);
          if (body) return body;
        }
    }
  }
  return undefined;
}

function pickParam(
  fn: Body,
  wanted: string | undefined,
): ts.ParameterDeclaration & {
  name: ts.Identifier;
} {
  const named = fn.parameters.filter((p): p is ts.ParameterDeclaration & { name: ts.Identifier } =>
    ts.isIdentifier(p.name),
  );
  const found =
    wanted !== undefined
      ? named.find((p) => p.name.text === wanted)
      : (named.find((p) => p.name.text === 'request' || p.name.text === 'scope') ??
        (fn.parameters[1] && ts.isIdentifier(fn.parameters[1].name)
          ? (fn.parameters[1] as ts.ParameterDeclaration & { name: ts.Identifier })
          : undefined));
  if (!found) throw new Error(`no parameter ${wanted ?? "'request', 'scope' or 2nd"} to track`);
  return found;
}

/** One line of totals, the files, then the call tree (`↺` a repeat, `↑` a climb). */
export function formatWalk(report: WalkReport): string {
  const lines = [
    `${report.entry} (tracking ${report.param}): ${report.filesEntered} files entered, ` +
      `${report.stays} stays, ${report.climbs} climbs, ${report.returnsToLeftFile} returns to a left file`,
    `files: ${report.files.join(', ')}`,
    ...report.steps.map(
      (s) =>
        `${'  '.repeat(s.depth + 1)}${s.file}:${s.fn}${s.repeat ? ' ↺' : ''}${s.climb ? ' ↑' : ''}`,
    ),
  ];
  return lines.join('\n');
}
