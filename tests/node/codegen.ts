// graphql-codegen for TypeScript clients: the client SDL (no Federation directives) and the
// multi-operation documents (each operation and fragment named once): `typescript` writes
// the schema's types to types.ts, `typescript-operations` each operation's to operations.ts. EpochMillis is a number of milliseconds since the Unix
// epoch (docs/scalars.md); JSON is any JSON value.
//
// tests/e2e/test_client_tools.py runs it to a temporary directory and compiles that with tsc.
//
//   npx graphql-codegen --config codegen.ts   (CODEGEN_OUT: the directory, default generated)
import type { CodegenConfig } from "@graphql-codegen/cli";

const out = process.env.CODEGEN_OUT ?? "generated";
const scalars = {
  EpochMillis: { input: "number", output: "number" },
  JSON: { input: "unknown", output: "unknown" },
};

const config: CodegenConfig = {
  schema: "../../graphql/client-schema.graphql",
  documents: "../../graphql/operations/*.graphql",
  generates: {
    [`${out}/types.ts`]: {
      plugins: ["typescript"],
      config: { scalars, strictScalars: true, enumsAsTypes: true },
    },
    // typescript-operations (6) would emit the schema types it needs again: in the file of
    // `typescript` that is a duplicate identifier for every input and enum, so it imports
    // them from types.ts instead.
    [`${out}/operations.ts`]: {
      plugins: ["typescript-operations"],
      config: {
        scalars,
        strictScalars: true,
        enumsAsTypes: true,
        useTypeImports: true,
        importSchemaTypesFrom: `${out}/types`,
      },
    },
  },
};

export default config;
