#!/usr/bin/env python3
# Writes test/fixtures/chat-templates.json: chat templates rendered by Python Jinja2 the way
# Hugging Face transformers' apply_chat_template renders them, so
# test/tokenizer/chat-template.test.ts can check src/tokenizer/chat-template.ts byte for byte
# against the reference implementation.
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
# Templates of more model families with their special tokens, each entry naming where it comes from:
# the @lenml/tokenizer-* packages' models/tokenizer_config.json, or the model's own template as
# llama.cpp (models/templates/) and Hugging Face's own Jinja ports quote it, so no dependency is added.
SOURCES = 'test/fixtures/chat-template-sources.json'


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


class PythonFailure(Exception):
    """Python itself failed while rendering (e.g. 'a' + 1, `in` on None, str.index of a missing substring)."""


def apply_chat_template(source, inp):
    """apply_chat_template(tokenize=False) for one conversation."""
    if inp['continueFinalMessage'] and inp['addGenerationPrompt']:
        raise ValueError('continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you want the model to continue the final message, and add_generation_prompt when you want to add a header that will prompt it to start a new assistant message instead.')
    variables = {**inp['specialTokens'], **inp.get('variables', {})}
    try:
        rendered = compile_template(source).render(
            messages=inp['messages'], tools=inp['tools'], documents=None, add_generation_prompt=inp['addGenerationPrompt'], **variables)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError, OverflowError) as e:
        raise PythonFailure(f'{type(e).__name__}: {e}') from e
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


def as_json_arguments(messages):
    """The conversation with each tool call's arguments as a JSON string (templates that concatenate them)."""
    out = []
    for m in messages:
        if m.get('tool_calls'):
            calls = [{**c, 'function': {**c['function'], 'arguments': json.dumps(c['function']['arguments'], ensure_ascii=False)}} for c in m['tool_calls']]
            m = {**m, 'tool_calls': calls}
        out.append(m)
    return out


def with_empty_content(messages):
    """The conversation with '' for each None content (Qwen3's template tests `'</think>' in content`)."""
    return [{**m, 'content': ''} if m.get('content', '') is None else m for m in messages]


THINKING = [
    {'role': 'user', 'content': 'What is 2 + 2?'},
    {'role': 'assistant', 'content': '<think>\nSimple arithmetic.\n</think>\n\n2 + 2 = 4.'},
    {'role': 'user', 'content': 'And 3 + 3?'},
    {'role': 'assistant', 'content': '<think>\nAgain simple.\n</think>\n\n3 + 3 = 6.'},
]
THINKING_TOOLS = [
    {'role': 'user', 'content': 'Weather in Paris?'},
    {'role': 'assistant', 'content': '<think>\nI should call the tool.\n</think>\n\nLet me check.', 'tool_calls': [
        {'id': 'a', 'type': 'function', 'function': {'name': 'get_weather', 'arguments': {'location': 'Paris'}}}]},
    {'role': 'tool', 'tool_call_id': 'a', 'content': '18'},
    {'role': 'assistant', 'content': 'It is 18 degrees.', 'reasoning_content': 'The tool said 18.'},
]
PARTS = [
    {'role': 'system', 'content': [{'type': 'text', 'text': ' Be brief. '}]},
    {'role': 'user', 'content': [{'type': 'image'}, {'type': 'text', 'text': ' What is in the picture? '}]},
    {'role': 'assistant', 'content': [{'type': 'text', 'text': 'A cat.'}]},
    {'role': 'user', 'content': 'Thanks'},
]


def system_tools(messages, tools):
    """Phi-4-mini's way: the tools as a JSON string in the system message's `tools` key."""
    return [{**messages[0], 'tools': json.dumps([t['function'] for t in tools], ensure_ascii=False)}] + messages[1:]


REASONING = [
    SYSTEM,
    {'role': 'user', 'content': 'What is 2 + 2?'},
    {'role': 'assistant', 'content': '2 + 2 = 4.', 'reasoning_content': 'Add two and two.'},
    {'role': 'user', 'content': 'And 3 + 3?'},
    {'role': 'assistant', 'content': '\n\n3 + 3 = 6.', 'reasoning_content': '\nAdd three and three.\n'},
]
SMOL_THINKING = [
    {'role': 'system', 'content': 'Be brief. /no_think'},
    {'role': 'user', 'content': 'Hi!'},
    {'role': 'assistant', 'content': '\n\nHello!'},
    {'role': 'user', 'content': 'Why?'},
]
SMOL_TOOLS = [
    {'role': 'user', 'content': 'Weather in Paris?'},
    {'role': 'assistant', 'content': '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'},
    {'role': 'tool', 'content': '18'},
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
    ] + model_cases('llama3_1') + model_cases('qwen3') + [
        case('qwen3: enable_thinking false', 'qwen3', [SYSTEM, USER], variables={'enable_thinking': False}),
        case('qwen3: enable_thinking true', 'qwen3', [SYSTEM, USER], variables={'enable_thinking': True}),
        case('qwen3: assistant messages with <think> content', 'qwen3', THINKING),
        case('qwen3: <think> content, no generation prompt', 'qwen3', THINKING, gen=False),
        case('qwen3: thinking, a tool call, its result, reasoning_content', 'qwen3', THINKING_TOOLS, tools=TOOLS),
        case('qwen3: two tool calls and two results', 'qwen3', TWO_TOOL_CALLS, tools=TOOLS),
        case('qwen3: tool call with empty content, its result, user turn', 'qwen3', with_empty_content(TOOL_CALL), tools=TOOLS),
        case('qwen3: two tool calls with empty content and two results', 'qwen3', with_empty_content(TWO_TOOL_CALLS), tools=TOOLS),
        case('qwen3: tool call arguments as a JSON string', 'qwen3', with_empty_content(as_json_arguments(TOOL_CALL)), tools=TOOLS),
    ] + model_cases('gemma3') + [
        case('gemma3: content as a list of parts', 'gemma3', PARTS),
        case('gemma3: user and assistant without a system message', 'gemma3', MULTI_TURN[1:], gen=False),
    ] + model_cases('deepseek_v3') + [
        case('deepseek_v3: tool call with JSON string arguments, its result, user turn', 'deepseek_v3', as_json_arguments(TOOL_CALL), tools=TOOLS),
        case('deepseek_v3: two tool calls and two results', 'deepseek_v3', as_json_arguments(TWO_TOOL_CALLS), tools=TOOLS),
        case('deepseek_v3: two system messages', 'deepseek_v3', [SYSTEM, {'role': 'system', 'content': 'Be brief.'}, USER]),
    ] + [
        case('qwen3: reasoning_content on assistant messages, before and after the last query', 'qwen3', REASONING),
        case('qwen3: reasoning_content, no generation prompt', 'qwen3', REASONING, gen=False),
        case('qwen3: reasoning_content with enable_thinking false', 'qwen3', REASONING[:4], variables={'enable_thinking': False}),
        case('qwen3: multi-turn with enable_thinking false, no generation prompt', 'qwen3', MULTI_TURN[:5], gen=False, variables={'enable_thinking': False}),
        case('gemma3: system folded into the first user turn, multi-turn', 'gemma3', MULTI_TURN),
        case('gemma3: system folded, no generation prompt', 'gemma3', MULTI_TURN[:5], gen=False),
    ] + model_cases('gemma2') + [
        case('gemma2: user and assistant turns', 'gemma2', MULTI_TURN[1:]),
        case('gemma2: user and assistant turns, no generation prompt', 'gemma2', MULTI_TURN[1:5], gen=False),
        case('gemma2: roles that do not alternate', 'gemma2', [USER, USER]),
    ] + model_cases('phi3_5') + [
        case('phi3_5: empty system message is left out', 'phi3_5', [{'role': 'system', 'content': ''}, USER]),
        case('phi3_5: multi-turn, no generation prompt', 'phi3_5', MULTI_TURN[:5], gen=False),
    ] + model_cases('phi4_mini') + [
        case('phi4_mini: tools in the system message', 'phi4_mini', system_tools([SYSTEM, USER], TOOLS)),
        case('phi4_mini: tools in the system message, multi-turn', 'phi4_mini', system_tools(MULTI_TURN, TOOLS)),
        case('phi4_mini: a tool result', 'phi4_mini', system_tools([SYSTEM, {'role': 'user', 'content': 'Weather?'},
             {'role': 'assistant', 'content': '[{"name": "get_weather", "arguments": {"location": "Paris"}}]'}, {'role': 'tool', 'content': '18'}], TOOLS)),
        case('phi4_mini: multi-turn, no generation prompt', 'phi4_mini', MULTI_TURN[:5], gen=False),
    ] + model_cases('smollm3') + [
        case('smollm3: enable_thinking false', 'smollm3', [SYSTEM, USER], variables={'enable_thinking': False}),
        case('smollm3: enable_thinking false, multi-turn', 'smollm3', MULTI_TURN, variables={'enable_thinking': False}),
        case('smollm3: enable_thinking true, multi-turn, no generation prompt', 'smollm3', MULTI_TURN[:5], gen=False, variables={'enable_thinking': True}),
        case('smollm3: /no_think in the system message', 'smollm3', SMOL_THINKING),
        case('smollm3: /think in the system message beats enable_thinking false', 'smollm3',
             [{'role': 'system', 'content': '/think Be brief.'}, USER], variables={'enable_thinking': False}),
        case('smollm3: /system_override', 'smollm3', [{'role': 'system', 'content': 'Only this. /system_override  '}, USER]),
        case('smollm3: no system message, enable_thinking false', 'smollm3', [USER], variables={'enable_thinking': False}),
        case('smollm3: xml_tools', 'smollm3', [USER], variables={'xml_tools': TOOLS, 'enable_thinking': False}),
        case('smollm3: python_tools', 'smollm3', [USER], variables={'python_tools': TOOLS}),
        case('smollm3: tool call and its result', 'smollm3', SMOL_TOOLS, tools=TOOLS),
        case('smollm3: content as a list of parts', 'smollm3', PARTS),
    ] + model_cases('deepseek_r1_distill_qwen') + [
        case('deepseek_r1_distill_qwen: assistant messages with <think> content', 'deepseek_r1_distill_qwen', THINKING),
        case('deepseek_r1_distill_qwen: <think> content, no generation prompt', 'deepseek_r1_distill_qwen', THINKING, gen=False),
        case('deepseek_r1_distill_qwen: tool call with JSON string arguments, its result, user turn', 'deepseek_r1_distill_qwen',
             as_json_arguments(TOOL_CALL), tools=TOOLS),
        case('deepseek_r1_distill_qwen: two tool calls and two results', 'deepseek_r1_distill_qwen', as_json_arguments(TWO_TOOL_CALLS), tools=TOOLS),
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
    'numbers': (
        "{{ 1e16 }} {{ 1e20 }} {{ 1.5e3 }} {{ 2E-7 }} {{ 1e15 }} {{ 12345678901234567.0 }} {{ 10 ** 16 }} {{ 1e16 | int }} {{ 0.1 + 0.2 }} {{ 1e300 * 1e10 }}\n"
        "{{ 3.14159 | round }} {{ 3.14159 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 7 | round }} {{ 3.7 | round(0, 'floor') }} {{ 3.2 | round(0, 'ceil') }} {{ -2.5 | round }}\n"
        "{{ [3, 1, 2] | max }} {{ [3, 1, 2] | min }} {{ [1, 2, 3.5] | sum }} {{ ['b', 'C', 'a'] | max }} {{ ['b', 'C', 'a'] | min }} {{ [] | sum }} {{ [1, 2] | sum(start=10) }}\n"
        "{{ 1 + 2 }} {{ 1 + 2.5 }} {{ true + 1 }} {{ 5 - 7 }} {{ 5.5 - 0.5 }} {{ [1] + [2, 3] }} {{ 'a' + 'b' }}\n"
    ),
    'sequences': (
        "{{ messages[::-1] | map(attribute='role') | join(',') }} {{ s[1:-1] }} {{ s[::-1] }} {{ s[::2] }} {{ s[-3:] }} {{ s[:2] }} {{ [1, 2, 3, 4, 5][1:4:2] }} {{ [1, 2, 3][5:] }}\n"
        "{{ 'b' in s }} {{ 'z' in s }} {{ 'z' not in s }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'v' in d }} {{ '' in s }} {{ 'bc' in s }}\n"
        "{% for ch in s %}{{ ch }}.{% endfor %} {% for ch in 'é👋' %}[{{ ch }}]{% endfor %}\n"
        "{{ (1, 'b') }} {{ (1,) }} {{ () }} {% for a, b in [(1, 2), (3, 4)] %}{{ a }}{{ b }};{% endfor %} {% set p = ('x', 'y') %}{{ p[1] }}\n"
        "{% for m in messages %}{{ loop.cycle('odd', 'even') }} {% endfor %}\n"
        "{{ [3, 1, 3, 2, 1] | unique | list }} {{ ['a', 'A', 'b'] | unique | list }} {{ [1, 2, 3] | reverse | list }} {{ s | reverse }} {{ 'one two  three\nfour' | wordcount }}\n"
    ),
    'string_methods': (
        "{{ s.find('c') }} {{ s.find('z') }} {{ s.rfind('c') }} {{ s.find('c', 3) }} {{ s.rfind('z') }}\n"
        "{{ '123'.isdigit() }} {{ '12a'.isdigit() }} {{ ''.isdigit() }} {{ 'abé'.isalpha() }} {{ 'ab1'.isalpha() }} {{ ' \t\n'.isspace() }} {{ ''.isspace() }} {{ 'a b'.isspace() }}\n"
        "{{ 'a,b,c'.rsplit(',', 1) }} {{ ' a  b '.rsplit() }} {{ 'a,b,c'.rsplit(',') }} {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'ab'.center(6) }} {{ 'ab'.center(7, '*') }} {{ 'abc'.center(6, '-') }}\n"
        "{{ s.endswith(('x', 'cbd')) }} {{ s.startswith(('x', 'ab')) }} {{ s.endswith(('x', 'y')) }} {{ s.startswith('bc', 1) }}\n"
        "{{ s.partition('b') }} {{ s.rpartition('b') }} {{ s.partition('z') }} {{ s.rpartition('z') }} {{ none | upper }} {{ 12 | lower }} {{ nothing | upper }}|\n"
        "{{ 'Hello'.upper() }} {{ 'a-b'.replace('-', '') }} {{ 'x'.ljust(3, '.') }}|{{ 'x'.rjust(3) }}|{{ 'ab cd'.split(' ') }} {{ 'Ab'.swapcase() }} {{ 'abc'.count('b') }}\n"
    ),
    'tests': (
        "{{ 5 is divisibleby 5 }} {{ 7 is divisibleby(2) }} {{ 3 is odd }} {{ s is lower }} {{ s is upper }} {{ s is eq 'abcbd' }} {{ 1 is ne 2 }} {{ 2 is gt 1 }}\n"
        "{{ 2 is ge 2 }} {{ 1 is lt 2 }} {{ 1 is le 1 }} {{ s is not eq 'x' }} {{ s | length is eq 5 }} {{ 1 is sameas 1 }} {{ none is sameas none }} {{ s is defined() }}\n"
        "{{ s is in ['abcbd'] }} {{ 'b' is in s }} {{ 'k' is in d }} {{ 'v' is in d }} {{ 'z' is not in s }} {{ 3 is in [1, 2] }} {{ messages[0].role is in ['user', 'system'] }} {{ 2 is in((1, 2)) }}\n"
        "{% if messages[0] is mapping and messages[0].role is eq 'system' %}system first{% else %}no system{% endif %} {{ 'x' if s is string else 'y' }}\n"
        "{{ [1, 2] < [1, 3] }} {{ (1, 2) >= (1, 2) }} {{ 'A' < 'a' }}\n"
    ),
    'select_map': (
        "{{ l | select('odd') | list }} {{ l | reject('even') | list }} {{ [0, 1, '', 'a', none] | select | list }} {{ l | select('gt', 1) | list }} {{ l | select('in', [1, 2]) | list }}\n"
        "{{ messages | selectattr('role', 'eq', 'user') | map(attribute='content') | join('|') }} {{ messages | rejectattr('role', 'in', ['user', 'system']) | list | length }} {{ messages | selectattr('nope', 'defined') | list }}\n"
        "{{ l | map('string') | join(',') }} {{ [' a ', 'b '] | map('trim') | list }} {{ [1.25, 2.5] | map('round', 1) | list }} {{ ['a', 'b'] | map('upper') | list }} {{ [{'x': 1}] | map('tojson', indent=2) | list }}\n"
        "{% for m in messages | selectattr('role', 'equalto', 'assistant') %}{{ loop.index }}:{{ m.content }} {% endfor %}\n"
    ),
    'scopes': (
        "{% set c = 0 %}{% for m in messages %}{% set c = c + 1 %}{{ c }}{% if loop.first %}{% set seen = true %}{% endif %}{{ seen is defined }} {% endfor %}|{{ c }}\n"
        "{% for m in messages %}{% set last = m.role %}{% endfor %}[{{ last }}] {% if true %}{% set y = 5 %}{% endif %}{{ y }}\n"
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% for x in [1, 2] %}{% set ns.n = ns.n + x %}{% endfor %}{% endfor %}{{ ns.n }}\n"
    ),
    'dict_methods': (
        "{% set p = {'type': 'array', 'items': {'type': 'string'}, 'keys': 1, 'get': 2} %}{{ p['items'] }} {{ p.items() | list | length }} {{ p.keys() | list }} {{ p['keys'] }} {{ p.get('get') }} {{ p['get'] }} {{ p.type }}\n"
        "{% for k, v in p.items() %}{{ k }};{% endfor %} {{ p.values() | list | length }}\n"
    ),
    'percent_format': (
        "{{ '%s-%d' % ('a', 3) }} {{ '%s' % 'x' }} {{ '%5.2f|%-4s|%04d|%+d|%r|%%|%.1s' % (3.14159, 'ab', 42, 5, 'q', 'xyz') }} {{ '%(a)s=%(b)d' % {'a': 'k', 'b': 2} }}\n"
        "{{ '%s' % [1, 2] }} {{ '%d' % 3.9 }} {{ '%x' % 255 }} {{ '%s and %s' % (none, true) }} {{ messages | join(', ', attribute='role') }} {{ 'abc' | join('-') }}\n"
    ),
    'macro_args': "{% macro m(a, b=2) %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1) }}|{{ m(1, 3, 4) }}|{{ m(1, c=5) }}|{{ m(1, 2, 3, 4) | length }}",
    'format_filter': "{{ '%.2f' | format(1.234) }} {{ '%s, %s' | format('a', 'b') }} {{ '%(x)s!' | format(x=1) }} {{ 'abcbd'.index('c') }} {{ 'abcbd'.rindex('b') }}",
    'slice_step_zero': "{{ messages[::0] }}",
    'index_missing': "{{ 'abc'.index('z') }}",
    'percent_missing': "{{ '%s %s' % ('a',) }}",
    'undefined_attribute': "{{ nothing.attr }}",
    'undefined_chain': "{{ messages[0].missing.deeper is defined }}",
    'undefined_element': "{{ messages[5].role }}",
    'undefined_on_str': "{{ messages[0].content.x.y }}",
    'undefined_on_none': "{{ none.x.y }}",
    'compare_mismatch': "{{ 'a' < 1 }}",
    'add_mismatch': "{{ 'a' + 1 }}",
    'add_none': "{{ messages[0].content + none }}",
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
    synthetic('numbers', [USER]),
    synthetic('sequences', MULTI_TURN, variables={'s': 'abcbd', 'd': {'k': 'v'}}),
    synthetic('string_methods', [USER], variables={'s': 'abcbd'}),
    synthetic('tests', MULTI_TURN, variables={'s': 'abcbd', 'd': {'k': 'v'}}),
    synthetic('select_map', MULTI_TURN, variables={'l': [3, 1, 2]}),
    synthetic('scopes', MULTI_TURN),
    synthetic('dict_methods', [USER]),
    synthetic('percent_format', MULTI_TURN),
    synthetic('percent_missing', [USER]),
    synthetic('format_filter', [USER]),
    synthetic('macro_args', [USER]),
    synthetic('index_missing', [USER]),
    synthetic('slice_step_zero', [USER]),
    synthetic('undefined_attribute', [USER]),
    synthetic('undefined_chain', [USER]),
    synthetic('undefined_element', [USER]),
    synthetic('undefined_on_str', [USER]),
    synthetic('undefined_on_none', [USER]),
    synthetic('compare_mismatch', [USER]),
    synthetic('add_mismatch', [USER]),
    synthetic('add_none', [USER]),
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
    with open(SOURCES, encoding='utf-8') as f:
        for key, source in json.load(f).items():
            templates[key] = source['chat_template']
            specials[key] = special_tokens_map(source['special_tokens'])
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
        except PythonFailure as e:
            # The message is Python's own: the renderer only has to fail too.
            c['failure'] = str(e)
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
