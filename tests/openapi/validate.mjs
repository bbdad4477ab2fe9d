// validate.mjs - checks that openapi.yaml is a valid OpenAPI 3.0 document.
//
//   node tests/openapi/validate.mjs [openapi.yaml]     (make openapi-validate)
//
// SwaggerParser.validate checks the document against the OpenAPI 3.0 JSON
// Schema and resolves every $ref; this prints each error and exits 1 when
// there is any. Dependencies: `npm ci` in tests/openapi (package-lock.json
// pins @apidevtools/swagger-parser). The conformance test against the server
// is conformance.py beside this file.
import SwaggerParser from '@apidevtools/swagger-parser';
import { fileURLToPath } from 'node:url';

const spec = process.argv[2] ?? fileURLToPath(new URL('../../openapi.yaml', import.meta.url));

try {
    const api = await SwaggerParser.validate(spec);
    if (!/^3\.0\./.test(api.openapi)) throw new Error(`openapi is ${api.openapi}, not 3.0.x`);
    const paths = Object.keys(api.paths).length;
    const ops = Object.values(api.paths).reduce((n, p) => n + Object.keys(p).length, 0);
    console.log(`openapi: ${spec} is valid OpenAPI ${api.openapi} (${paths} paths, ${ops} operations)`);
} catch (err) {
    // A schema violation lists every error in err.details; print them all.
    console.error(`openapi: ${spec} is not valid`);
    for (const d of err.details ?? [])
        console.error(`  ${d.instancePath || '/'}: ${d.message} ${JSON.stringify(d.params ?? {})}`);
    if (!err.details) console.error(`  ${err.message}`);
    process.exit(1);
}
