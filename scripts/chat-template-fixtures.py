#!/usr/bin/env python3
# Writes test/fixtures/chat-templates.json: chat templates rendered by Python Jinja2 the way
# Hugging Face transformers' apply_chat_template renders them, so test/chat-template.test.ts can
# check src/tokenizer/chat-template.ts byte for byte against the reference implementation.
#
#   python3 scripts/chat-template-fixtures.py     (needs jinja2 >= 3.1; run from the repository root)
#
# The environment is built here as transformers builds it: ImmutableSandboxedEnvironment with
# trim_blocks, lstrip_blocks and loop controls, a `{% generation %}` tag that renders its body,
# tojson as json.dumps (ensure_ascii=False, Python's spacing), raise_exception raising a
# TemplateError, and strftime_now -- here on a fixed date, so the output does not depend on the day.
# The variables are messages, tools, documents (None), add_generation_prompt, the special tokens
# and the extra keyword arguments; continue_final_message cuts the output after the final message.
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime(2024, 7, 26, 9, 5, 3)
OUT = 'test/fixtures/chat-templates.json'


class GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: transformers marks assistant text with it; it renders its body."""

    tags = {'generation'}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(['name:endgeneration'], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method('_render'), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def compile_template(source):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters['tojson'] = tojson
    env.globals['raise_exception'] = raise_exception
    env.globals['strftime_now'] = lambda fmt: NOW.strftime(fmt)
    return env.from_string(source)


def apply_chat_template(source, inp):
    """apply_chat_template(tokenize=False) for one conversation."""
    if inp['continueFinalMessage'] and inp['addGenerationPrompt']:
        raise ValueError('continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you want the model to continue the final message, and add_generation_prompt when you want to add a header that will prompt it to start a new assistant message instead.')
    variables = {**inp['specialTokens'], **inp.get('variables', {})}
    rendered = compile_template(source).render(
        messages=inp['messages'], tools=inp['tools'], documents=None, add_generation_prompt=inp['addGenerationPrompt'], **variables)
    if inp['continueFinalMessage']:
        final = inp['messages'][-1]['content']
        if final.strip() not in rendered:
            raise ValueError('continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible.')
        at = rendered.rindex(final.strip())
        if rendered[at:at + len(final.lstrip())] == final:
            rendered = rendered[:at + len(final.lstrip())]
        else:
            rendered = rendered[:at + len(final.strip())]
    return rendered


def special_tokens_map(config):
    """transformers' special_tokens_map: the set special tokens as text, additional_special_tokens when non-empty."""
    def text(v):
        return v['content'] if isinstance(v, dict) else v
    out = {}
    for key in ['bos_token', 'eos_token', 'unk_token', 'sep_token', 'pad_token', 'cls_token', 'mask_token']:
        v = text(config.get(key))
        if v:
            out[key] = v
    extra = [text(v) for v in config.get('additional_special_tokens') or []]
    if extra:
        out['additional_special_tokens'] = extra
    return out


# ---- Conversations ----

SYSTEM = {'role': 'system', 'content': 'You are a helpful assistant.'}
USER = {'role': 'user', 'content': 'What is the capital of France?'}
MULTI_TURN = [
    SYSTEM,
    {'role': 'user', 'content': 'Hi!'},
    {'role': 'assistant', 'content': 'Hello! How can I help?'},
    {'role': 'user', 'content': 'Tell me a joke.'},
    {'role': 'assistant', 'content': 'Why did the chicken cross the road?'},
    {'role': 'user', 'content': 'Why?'},
]
UNICODE = [
    {'role': 'system', 'content': '  Réponds en français, s\'il te plaît.  \n'},
    {'role': 'user', 'content': 'Café naïve — 日本語 中文 한국어 👋🏽👨‍👩‍👧 line\u2028sep para\u2029sep "quotes" \'single\' back\\slash \\n tab\there\n'},
    {'role': 'assistant', 'content': '\u00a0¿Qué? «Ελληνικά» 🎉\r\n'},
    {'role': 'user', 'content': 'Ünïcödé end \u0000 nul \u001f unit \u007f del \ufeff bom'},
]
TOOLS = [
    {
        'type': 'function',
        'function': {
            'name': 'get_weather',
            'description': 'Météo actuelle d\'une ville (température en °C) — 天気',
            'parameters': {
                'type': 'object',
                'properties': {
                    'location': {'type': 'string', 'description': 'City and country, e.g. "Paris, France"'},
                    'unit': {'type': 'string', 'enum': ['celsius', 'fahrenheit'], 'default': 'celsius'},
                    'options': {
                        'type': 'object',
                        'properties': {
                            'hourly': {'type': 'boolean'},
                            'days': {'type': 'integer', 'minimum': 1, 'maximum': 14},
                            'threshold': {'type': 'number', 'multipleOf': 0.5},
                        },
                        'required': [],
                    },
                },
                'required': ['location'],
                'additionalProperties': False,
            },
        },
    },
    {
        'type': 'function',
        'function': {
            'name': 'search_docs',
            'description': 'Search the documentation.\nReturns at most `limit` results.',
            'parameters': {
                'type': 'object',
                'properties': {
                    'query': {'type': 'string'},
                    'limit': {'type': 'integer', 'default': 10},
                    'filters': {'type': 'array', 'items': {'type': 'object', 'properties': {'field': {'type': 'string'}, 'value': {}}}},
                    'scale': {'type': 'number', 'default': 1e-05},
                },
                'required': ['query'],
            },
        },
    },
]
TOOL_CALL = [
    SYSTEM,
    {'role': 'user', 'content': 'What is the weather in Paris?'},
    {
        'role': 'assistant',
        'content': None,
        'tool_calls': [{
            'id': 'call_1',
            'type': 'function',
            'function': {'name': 'get_weather', 'arguments': {'location': 'Paris, France', 'unit': 'celsius', 'options': {'hourly': True, 'days': 2, 'threshold': 0.5}, 'note': 'é "q" \\ 日'}},
        }],
    },
    {'role': 'tool', 'tool_call_id': 'call_1', 'content': '{"temperature": 21.5, "condition": "sunny ☀"}'},
    {'role': 'user', 'content': 'Thanks! And tomorrow?'},
]
TWO_TOOL_CALLS = [
    {'role': 'user', 'content': 'Weather in Paris and Rome?'},
    {'role': 'assistant', 'content': None, 'tool_calls': [
        {'id': 'a', 'type': 'function', 'function': {'name': 'get_weather', 'arguments': {'location': 'Paris'}}},
        {'id': 'b', 'type': 'function', 'function': {'name': 'get_weather', 'arguments': {'location': 'Rome'}}},
    ]},
    {'role': 'tool', 'tool_call_id': 'a', 'content': '18'},
    {'role': 'tool', 'tool_call_id': 'b', 'content': '25'},
]
CONTINUE = [SYSTEM, USER, {'role': 'assistant', 'content': 'The capital of France is'}]
CONTINUE_TRAILING = [USER, {'role': 'assistant', 'content': '  Sure, the answer is  \n'}]


def case(name, template, messages, gen=True, tools=None, cont=False, variables=None):
    return {'name': name, 'template': template, 'input': {
        'messages': messages, 'tools': tools, 'addGenerationPrompt': gen, 'continueFinalMessage': cont,
        **({'variables': variables} if variables is not None else {}),
    }}


def model_cases(t):
    return [
        case(f'{t}: system + user, generation prompt', t, [SYSTEM, USER]),
        case(f'{t}: system + user, no generation prompt', t, [SYSTEM, USER], gen=False),
        case(f'{t}: multi-turn', t, MULTI_TURN),
        case(f'{t}: unicode, quotes, backslashes, line separators', t, UNICODE),
        case(f'{t}: a lone user message', t, [USER]),
        case(f'{t}: tools offered', t, [SYSTEM, USER], tools=TOOLS),
        case(f'{t}: assistant tool call, tool result, user turn', t, TOOL_CALL, tools=TOOLS),
        case(f'{t}: continue_final_message', t, CONTINUE, gen=False, cont=True),
        case(f'{t}: continue_final_message with trailing spaces', t, CONTINUE_TRAILING, gen=False, cont=True),
        case(f'{t}: continue_final_message and add_generation_prompt', t, CONTINUE, gen=True, cont=True),
    ]


CASES = (
    model_cases('llama3_2') + [
        case('llama3_2: chat_template_kwargs date_string', 'llama3_2', [SYSTEM, USER], variables={'date_string': '01 Jan 2025'}),
        case('llama3_2: tools in the system message (tools_in_user_message false)', 'llama3_2', [SYSTEM, USER], tools=TOOLS,
             variables={'tools_in_user_message': False}),
        case('llama3_2: tools without a user message', 'llama3_2', [SYSTEM], tools=TOOLS),
        case('llama3_2: two tool calls in one message', 'llama3_2', TWO_TOOL_CALLS, tools=TOOLS),
    ] + model_cases('qwen2_5') + [
        case('qwen2_5: two tool calls and two results', 'qwen2_5', TWO_TOOL_CALLS, tools=TOOLS),
        case('qwen2_5: chat_template_kwargs (unused by the template)', 'qwen2_5', [USER], variables={'enable_thinking': False}),
    ]
)

# ---- Small templates for single features ----

SYNTHETIC = {
    'tojson': (
        "{{ tools | tojson(indent=2) }}\n"
        "{{ tools[1] | tojson }}\n"
        "{{ data | tojson(indent=4, sort_keys=true) }}\n"
        "{{ data | tojson(separators=(',', ':')) }}\n"
        "{{ data | tojson(ensure_ascii=true) }}\n"
        "{{ data | tojson(indent=0) }}\n"
        "{{ data | tojson(indent='\\t') }}\n"
        "{{ [] | tojson(indent=2) }} {{ {} | tojson(indent=2) }} {{ 'x' | tojson }} {{ none | tojson }} {{ 1.0 | tojson }} {{ (1, 2) | tojson }}\n"
    ),
    'loops': (
        "{% for m in messages %}\n"
        "  {% if m.role == 'skip' %}{% continue %}{% endif %}\n"
        "  {% if m.role == 'stop' %}{% break %}{% endif %}\n"
        "{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.revindex }}{% if loop.first %} first{% endif %}{% if loop.last %} last{% endif %}: {{ m.role }}\n"
        "{% endfor %}\n"
        "{% for x in missing %}{{ x }}{% else %}nothing to iterate{% endfor %}\n"
        "{% for k, v in data.nested.items() %}{{ k }}={{ v }};{% endfor %}\n"
        "{% for k in data.nested %}{{ k }}{{ ',' if not loop.last }}{% endfor %}\n"
    ),
    'namespace': (
        "{%- set ns = namespace(users=0, last_user=-1, seen=false) -%}\n"
        "{%- for m in messages -%}\n"
        "    {%- if m.role == 'user' -%}\n"
        "        {%- set ns.users = ns.users + 1 -%}\n"
        "        {%- set ns.last_user = loop.index0 -%}\n"
        "        {%- set ns.seen = true -%}\n"
        "    {%- endif -%}\n"
        "{%- endfor -%}\n"
        "users={{ ns.users }} last={{ ns.last_user }} seen={{ ns.seen }}\n"
    ),
    'defined': (
        "{{ foo is defined }} {{ messages is defined }} {{ tools is defined }} {{ tools is none }} {{ documents is none }}\n"
        "{% if bar is not defined %}bar undefined{% endif %} {{ bos_token is defined }} {{ custom is defined }}\n"
        "[{{ foo }}] {{ foo | default('fallback') }} {{ none | default('not used') }} {{ '' | default('empty', true) }}\n"
        "{{ 'abc' is string }} {{ data is mapping }} {{ data is iterable }} {{ 'abc' is iterable }} {{ 3 is number }} {{ true is boolean }}\n"
    ),
    'strings': (
        "[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ s | trim }}]\n"
        "[{{ t.strip('x') }}] [{{ t.lstrip('xy') }}] [{{ t.rstrip('x') }}] [{{ t | trim('x') }}]\n"
        "{{ s.startswith('  a') }} {{ s.strip().startswith(('b', 'a')) }} {{ s.endswith('z') }} {{ s.strip().endswith('c') }}\n"
        "{{ s.split() }} {{ u.split(',') }} {{ u.split(',', 1) }} {{ u.split(',')[-1] }} {{ u.split(',') | length }}\n"
        "{{ 'hELLO wORLD'.capitalize() }} {{ 'hELLO wORLD' | capitalize }} {{ 'hello big-world' | title }} {{ 'MiXeD'.upper() }} {{ 'MiXeD'.lower() }}\n"
        "{{ s.replace('a', 'A') }} {{ 'aaa'.replace('a', 'b', 2) }} {{ ', '.join(['x', 'y']) }} {{ ['p', 1, true, none] | join('-') }}\n"
        "{{ w | length }} {{ w[0] }} {{ 'x' ~ none ~ true ~ 1.5 ~ 2 }}\n"
        "{{ v.strip() }}|{{ v | trim }}|{{ v.split() }}\n"
    ),
    'values': (
        "{{ none }} {{ true }} {{ false }} {{ 1 }} {{ 1.0 }} {{ -0.0 }} {{ 1/3 }} {{ 10/4 }} {{ 6/3 }} {{ 0.00001 }} {{ 123456789.125 }} {{ data.tiny }} {{ data.small }} {{ data.third }}\n"
        "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 % 2 }} {{ 2 ** 10 }} {{ 2 * 1.5 }} {{ -3.7 | int }} {{ 3.7 | int }}\n"
        "{{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ 'é' > 'z' }} {{ '\uffff' < '👋' }} {{ 'ab' <= 'ab' }} {{ 2 >= 1.5 }} {{ true > 0 }}\n"
        "{{ [1, 'a', none, true, 2.5] }} {{ {'k': 'v', 'n': none, 'b': false} }} {{ (1, 'two') }}\n"
        "{{ [\"it's\", 'say \"hi\"', 'both \\' and \"', 'back\\\\slash', 'new\\nline', 'é日👋', '\\u2028'] }}\n"
        "{{ data }}\n"
        "{{ messages[0] }}\n"
        "{{ 1 == 1.0 }} {{ 'a' == 'a' }} {{ '1' == 1 }} {{ none == none }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ 1 == true }} {{ 'a' != 'b' }}\n"
    ),
    'strftime': (
        "{{ strftime_now('%Y-%m-%d %H:%M:%S') }}|{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%d %B %Y') }}\n"
        "{{ strftime_now('%A %a %j %I%p %y %e %-d %-m %%') }}|{{ strftime_now('%B %d, %Y') }}|{{ strftime_now('%F %T') }}\n"
    ),
    'raise': (
        "{% for m in messages %}\n"
        "{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}\n"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/... (got ' ~ m.role ~ ' at ' ~ loop.index0 ~ ')') }}\n"
        "{% endif %}\n"
        "[{{ m.role }}] {{ m.content }}\n"
        "{% endfor %}\n"
    ),
    'whitespace': (
        "{# a comment on its own line #}\n"
        "    {% if true %}\n"
        "  indented text\n"
        "    {% endif %}\n"
        "{%- if true -%}\n"
        "   trimmed both sides   \n"
        "{%- endif %}\n"
        "\n"
        "{{- ' x ' -}}   \n"
        "  {{ bos_token }}  {{ eos_token }}\n"
        "{% set greeting %}Hello {{ messages[0].role }}{% endset %}{{ greeting }}\n"
        "{% macro tag(name, body='none') %}<{{ name }}>{{ body }}</{{ name }}>{% endmacro %}\n"
        "{{ tag('a') }}{{ tag('b', body=1) }}\n"
        "{% generation %}assistant text{% endgeneration %}\n"
        "{%- generation -%}  generated  {%- endgeneration %}\n"
        "last line with a trailing newline\n"
    ),
    'filters': (
        "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(', ') }}\n"
        "{{ messages | rejectattr('role', 'equalto', 'user') | list | length }} {{ messages | length }} {{ messages[-1].role }} {{ messages[1:] | length }}\n"
        "{{ messages | first | tojson }} {{ (messages | last).content }} {{ [3, 1, 2] | sort }} {{ ['b', 'a'] | reverse | list }} {{ [1, 1, 2] | unique | list }}\n"
        "{{ data.nested | items | list }} {{ data.nested | dictsort }} {{ data.nested.keys() | list }} {{ data.nested.values() | list }} {{ data.get('nope', 'dflt') }}\n"
        "{{ '3' | int + 1 }} {{ 2 | float }} {{ -3 | abs }} {{ 'ab' | upper }} {{ 'line1\\nline2' | indent(2) }} {{ 'x' * 3 }}\n"
        "{{ dict(a=1, b=[true]) }} {{ range(3) | list }} {% for i in range(1, 10, 4) %}{{ i }}{% endfor %} {{ messages[::-1] | map(attribute='role') | join(',') }}\n"
    ),
    'continue_lost': "{% for m in messages %}[{{ m.role }}]{% endfor %}",
    'syntax_error': "{% if messages %}unclosed",
}


def synthetic(name, messages, gen=False, tools=None, cont=False, variables=None, label=''):
    return case(f'synthetic {name}{label}', name, messages, gen=gen, tools=tools, cont=cont, variables=variables)


DATA = {
    'name': 'Zoë', 'count': 3, 'ratio': 0.25, 'tiny': 1e-05, 'small': 2.5e-07, 'third': 1 / 3, 'neg': -7, 'ok': True, 'nothing': None,
    'list': [1, 'two', [3, []], {}], 'nested': {'b': 1, 'a': 'x', 'é': '日本', 'Z': None},
    'quote': 'say "hi" \\ \n\t\u0001 \u2028 👋',
}
STRINGS = {'s': '  abc  \n', 't': 'xxyhello worldyxx', 'u': 'a,b,,c', 'w': 'é👋x', 'v': '\u001c\u0085 py space \ufeff\u00a0'}
SYNTHETIC_CASES = [
    synthetic('tojson', [USER], tools=TOOLS, variables={'data': DATA}),
    synthetic('loops', [{'role': 'user'}, {'role': 'skip'}, {'role': 'assistant'}, {'role': 'user'}, {'role': 'stop'}, {'role': 'user'}],
              variables={'data': DATA}),
    synthetic('namespace', MULTI_TURN),
    synthetic('defined', [USER], variables={'data': DATA}),
    synthetic('strings', [USER], variables=STRINGS),
    synthetic('values', [USER], variables={'data': DATA}),
    synthetic('strftime', [USER]),
    synthetic('raise', [USER, {'role': 'assistant', 'content': 'a'}, {'role': 'user', 'content': 'b'}]),
    synthetic('raise', [USER, {'role': 'user', 'content': 'again'}], label=': roles that do not alternate'),
    synthetic('whitespace', [USER]),
    synthetic('filters', MULTI_TURN, variables={'data': DATA}),
    synthetic('continue_lost', CONTINUE, cont=True),
    synthetic('syntax_error', [USER]),
]


def main():
    templates = {}
    specials = {}
    for key, package in [('llama3_2', 'tokenizer-llama3_2'), ('qwen2_5', 'tokenizer-qwen2_5')]:
        with open(f'node_modules/@lenml/{package}/models/tokenizer_config.json', encoding='utf-8') as f:
            config = json.load(f)
        templates[key] = config['chat_template']
        specials[key] = special_tokens_map(config)
    templates.update(SYNTHETIC)
    specials.update({name: {'bos_token': '<s>', 'eos_token': '</s>'} for name in SYNTHETIC})

    out = []
    for c in CASES + SYNTHETIC_CASES:
        c['input']['specialTokens'] = specials[c['template']]
        try:
            c['expected'] = apply_chat_template(templates[c['template']], c['input'])
        except jinja2.exceptions.TemplateSyntaxError as e:
            c['syntaxError'] = str(e)
        except (jinja2.exceptions.TemplateError, ValueError) as e:
            c['error'] = str(e)
        out.append(c)
    fixture = {
        'about': 'Generated by scripts/chat-template-fixtures.py with Python Jinja2 ' + jinja2.__version__ + ' as transformers apply_chat_template renders; do not edit.',
        'now': [NOW.year, NOW.month, NOW.day, NOW.hour, NOW.minute, NOW.second],
        'templates': templates,
        'cases': out,
    }
    with open(OUT, 'w', encoding='utf-8') as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write('\n')
    print(f'wrote {OUT}: {len(out)} cases', file=sys.stderr)


if __name__ == '__main__':
    main()
