// A structural tag checked before XGrammar compiles it: the rules of its parser and analyzer
// (cpp/structural_tag.cc), whose errors reach JS as a bare C++ exception with no message, mirrored
// here with their messages; the JSON schemas, regexes and grammars inside it checked as on their
// own; the nesting and the estimated cost of the whole.
import { POSITION_COST } from './char-cost.ts';
import { ebnfShape } from './ebnf-cost.ts';
import { MAX_DEPTH, MAX_REGEX_CHARS } from './limits.ts';
import { RegexError } from './ecma-regex.ts';
import { regexOutputGrammar } from './pattern-rule.ts';
import { regexShape } from './regex-cost.ts';
import { checkJsonSchema, type SchemaWhitespace } from './schema-check.ts';
import { StructuredOutputError } from './types.ts';

type Json = Record<string, unknown>;

/**
 * Each JSON schema in a tag compiles with rules of its own for any JSON value: ~43 ms each measured
 * (100 tool calls of small schemas took 4.3 s).
 */
const SCHEMA_FORMAT_COST = 45;

/** The format a structural tag holds: `tag` is `{type?: 'structural_tag', format}` or a format itself. */
export function structuralTagFormat(tag: Json): { format: unknown; path: string } {
  if (!('format' in tag)) return { format: tag, path: '#' };
  if (tag.type !== undefined && tag.type !== 'structural_tag') throw invalid('type must be "structural_tag" when a format is given', '#/type');
  return { format: tag.format, path: '#/format' };
}

/**
 * Checks a structural tag's format and estimates its compile cost (milliseconds, limits.ts), its
 * JSON schemas written with `whitespace` (compact by default).
 */
export function checkStructuralTag(tag: Json, whitespace: SchemaWhitespace = { kind: 'compact' }): number {
  const { format, path } = structuralTagFormat(tag);
  const checker = new TagChecker(whitespace);
  checker.format(format, path, path === '#' ? 1 : 2);
  return checker.cost;
}

class TagChecker {
  cost = 0;

  constructor(private readonly whitespace: SchemaWhitespace) {}

  /** Checks one format; returns whether it is unlimited (its end is not its own: any_text, triggered tags, ...). */
  format(node: unknown, path: string, depth: number): boolean {
    if (depth > MAX_DEPTH) throw new StructuredOutputError(`Invalid structural tag: nested more than ${MAX_DEPTH} levels deep (at ${path})`);
    if (!isObject(node)) throw invalid('a format must be an object', path);
    const at = (key: string) => `${path}/${key}`;
    const nonEmptyString = (key: string, what: string) => {
      if (typeof node[key] !== 'string' || node[key] === '') throw invalid(`${what} must have a ${key} field with a non-empty string`, at(key));
      return node[key] as string;
    };
    const formats = (key: string, what: string) => {
      const list = node[key];
      if (!Array.isArray(list) || list.length === 0) throw invalid(`${what} must have a non-empty ${key} array`, at(key));
      return list.map((element, i) => this.format(element, `${at(key)}/${i}`, depth + 2));
    };
    const flags = () => {
      for (const key of ['at_least_one', 'stop_after_first']) {
        if (key in node && typeof node[key] !== 'boolean') throw invalid(`${key} must be a boolean`, at(key));
      }
    };
    switch (node.type) {
      case 'const_string':
        nonEmptyString('value', 'a const_string format');
        return false;
      case 'any_text':
        if (Object.keys(node).some((k) => k !== 'type')) throw invalid('an any_text format has no fields but type', path);
        this.cost += POSITION_COST.wide;
        return true;
      case 'json_schema':
      case 'qwen_xml_parameter': {
        const schema = node.json_schema;
        if (typeof schema !== 'boolean' && !isObject(schema)) throw invalid(`a ${node.type} format must have a json_schema field with an object or a boolean`, at('json_schema'));
        // A json_schema is compiled with the tag's whitespace (tag-schemas.ts); XGrammar compiles a
        // qwen_xml_parameter's with any whitespace, unbounded.
        const whitespace = node.type === 'json_schema' ? this.whitespace : { kind: 'any' as const };
        this.cost += SCHEMA_FORMAT_COST + checkJsonSchema(schema, whitespace, depth + 1).cost;
        return false;
      }
      case 'grammar': {
        const shape = ebnfShape(nonEmptyString('grammar', 'a grammar format'));
        if (depth + shape.depth > MAX_DEPTH) throw invalid(`the grammar nests groups more than ${MAX_DEPTH} levels deep`, at('grammar'));
        this.cost += shape.cost;
        return false;
      }
      case 'regex': {
        const pattern = nonEmptyString('pattern', 'a regex format');
        if (pattern.length > MAX_REGEX_CHARS) throw invalid(`the regex is ${pattern.length} characters long; at most ${MAX_REGEX_CHARS} are supported`, at('pattern'));
        const shape = regexShape(pattern);
        if (depth + shape.depth > MAX_DEPTH) throw invalid(`the regex nests groups more than ${MAX_DEPTH} levels deep`, at('pattern'));
        try {
          regexOutputGrammar(pattern); // written as a grammar of ours (tag-schemas.ts)
        } catch (error) {
          if (!(error instanceof RegexError)) throw error;
          throw error.kind === 'invalid'
            ? invalid(`the regex is not valid: ${error.message}`, at('pattern'))
            : new StructuredOutputError(`Unsupported structural tag: the regex: ${error.message} (at ${at('pattern')})`);
        }
        this.cost += shape.cost;
        return false;
      }
      case 'sequence': {
        const unlimited = formats('elements', 'a sequence format');
        const early = unlimited.slice(0, -1).indexOf(true);
        if (early >= 0) throw invalid(`only the last element of a sequence may be unlimited (any_text, triggered_tags, tags_with_separator), but element ${early} is`, at('elements'));
        return unlimited[unlimited.length - 1]!;
      }
      case 'or': {
        const unlimited = formats('elements', 'an or format');
        if (unlimited.includes(true) && unlimited.includes(false)) throw invalid('the elements of an or format must be all unlimited or all limited', at('elements'));
        return unlimited[0]!;
      }
      case 'tag':
        return this.tag(node, path, depth);
      case 'triggered_tags': {
        const triggers = node.triggers;
        if (!Array.isArray(triggers) || triggers.length === 0 || !triggers.every((t) => typeof t === 'string' && t !== '')) {
          throw invalid('a triggered_tags format must have a non-empty triggers array of non-empty strings', at('triggers'));
        }
        const tags = this.tags(node, path, depth);
        tags.forEach((begin, i) => {
          const matched = (triggers as string[]).filter((t) => begin.startsWith(t)).length;
          if (matched !== 1) throw invalid(`tag ${i} begins with ${matched === 0 ? 'no trigger' : 'more than one trigger'}; each must begin with exactly one`, `${at('tags')}/${i}/begin`);
        });
        flags();
        return true;
      }
      case 'tags_with_separator':
        this.tags(node, path, depth);
        nonEmptyString('separator', 'a tags_with_separator format');
        flags();
        return true;
      default:
        throw invalid(typeof node.type === 'string' ? `format type ${JSON.stringify(node.type)} is not one XGrammar knows` : 'a format must have a type', at('type'));
    }
  }

  /** A tag format: `begin`, `content`, `end`. */
  private tag(node: Json, path: string, depth: number): false {
    if (node.type !== undefined && node.type !== 'tag') throw invalid('a tag must have type "tag"', `${path}/type`);
    if (typeof node.begin !== 'string') throw invalid("a tag format's begin must be a string", `${path}/begin`);
    if (!('content' in node)) throw invalid('a tag format must have a content', `${path}/content`);
    const unlimited = this.format(node.content, `${path}/content`, depth + 1);
    if (typeof node.end !== 'string') throw invalid("a tag format's end must be a string", `${path}/end`);
    if (unlimited && node.end === '') throw invalid("a tag whose content is unlimited must have a non-empty end", `${path}/end`);
    return false;
  }

  /** The `tags` of triggered_tags or tags_with_separator; returns their begins. */
  private tags(node: Json, path: string, depth: number): string[] {
    const tags = node.tags;
    if (!Array.isArray(tags) || tags.length === 0) throw invalid(`a ${String(node.type)} format must have a non-empty tags array`, `${path}/tags`);
    return tags.map((tag, i) => {
      const at = `${path}/tags/${i}`;
      if (!isObject(tag)) throw invalid('a tag format must be an object', at);
      this.tag(tag, at, depth + 2);
      return tag.begin as string;
    });
  }
}

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function invalid(problem: string, path: string): StructuredOutputError {
  return new StructuredOutputError(`Invalid structural tag: ${problem} (at ${path})`);
}
