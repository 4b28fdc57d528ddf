// The JSON schemas inside a structural tag, compiled as our JSON schemas are: each `json_schema`
// content becomes a `grammar` content holding the schema's grammar (schema-splice.ts), written
// with the request's whitespace (compact by default; XGrammar would give a tag's schemas any
// whitespace, unbounded, and a random-weight model then writes whitespace until its tokens run
// out) and our rules for bounded numbers and formats. XGrammar renames the rules of each grammar
// content where they clash with another's (measured), so several schemas compose.
// A `qwen_xml_parameter` content stays XGrammar's (its XML form has no grammar of ours): a schema
// there that needs rules of ours is refused. Each `regex` content becomes a `grammar` content too:
// the regex's grammar of ours (pattern-rule.ts), which XGrammar's regex reader would misread.
// Browser code: nothing here may import Node modules.
import { regexOutputGrammar } from './pattern-rule.ts';
import { isObject, type Json } from './schema-keywords.ts';
import { spliceSchema, type SplicedSchema } from './schema-splice.ts';
import { StructuredOutputError } from './types.ts';

export interface TagSchemas {
  /** The json_schema contents, spliced, in the order `withGrammars` takes their grammars. */
  readonly spliced: readonly SplicedSchema[];
  /** The tag with each json_schema content replaced by a grammar content of the given EBNF text. */
  withGrammars(grammars: readonly string[]): Json;
}

/**
 * The schemas of a checked structural tag (`{type: 'structural_tag', format}`), its regexes
 * replaced by grammars; the tag is not changed.
 */
export function tagSchemas(tag: Json): TagSchemas {
  const spliced: SplicedSchema[] = [];
  const copy = JSON.parse(JSON.stringify(tag)) as Json;
  visitSchemas(copy.format, (node) => {
    if (node.type === 'regex') {
      node.type = 'grammar';
      node.grammar = regexOutputGrammar(node.pattern as string);
      delete node.pattern;
      return;
    }
    const schema = spliceSchema(node.json_schema);
    if (node.type === 'json_schema') spliced.push(schema);
    else if (schema.markers.length > 0) {
      throw new StructuredOutputError(
        'Unsupported structural tag: a qwen_xml_parameter schema may not have number bounds, string lengths, patterns, or formats but uuid, duration, uri-reference, password and binary (XGrammar gets them wrong, and its XML form takes no rules of ours)',
      );
    } else node.json_schema = JSON.parse(schema.text) as unknown; // formats renamed to their aliases
  });
  const text = JSON.stringify(copy);
  return {
    spliced,
    withGrammars(grammars) {
      const copy = JSON.parse(text) as Json;
      let next = 0;
      visitSchemas(copy.format, (node) => {
        if (node.type !== 'json_schema') return;
        delete node.json_schema;
        node.type = 'grammar';
        node.grammar = grammars[next++];
      });
      return copy;
    },
  };
}

/** Calls `visit` on each json_schema, qwen_xml_parameter and regex format inside `format`, in document order. */
function visitSchemas(format: unknown, visit: (node: Json) => void): void {
  if (!isObject(format)) return;
  switch (format.type) {
    case 'json_schema':
    case 'qwen_xml_parameter':
    case 'regex':
      visit(format);
      return;
    case 'sequence':
    case 'or':
      if (Array.isArray(format.elements)) for (const element of format.elements) visitSchemas(element, visit);
      return;
    case 'triggered_tags':
    case 'tags_with_separator':
      if (Array.isArray(format.tags)) for (const tag of format.tags) visitSchemas(tag, visit);
      return;
    case 'tag':
    case undefined: // a tag in a tags list may leave its type out
      visitSchemas(format.content, visit);
      return;
  }
}
