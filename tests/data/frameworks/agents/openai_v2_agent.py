"""A hand-written tool loop on the OpenAI SDK, traced by the OpenTelemetry contrib
opentelemetry-instrumentation-openai-v2 (the model calls; content per
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT) and execute_tool spans written by hand under
the GenAI conventions (the instrumentation traces the client only)."""

import json

import _common as c
from openai import OpenAI
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.trace import Status, StatusCode

provider = c.tracer_provider("openai-v2-recording")
OpenAIInstrumentor().instrument(tracer_provider=provider)
tracer = provider.get_tracer(__name__)
client = OpenAI(base_url=c.BASE_URL, api_key=c.API_KEY)
TOOLS = {f.__name__: f for f in (c.lookup_order, c.cancel_order)}
SCHEMAS = [
    {"type": "function", "function": {"name": name, "description": f.__doc__,
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}
    for name, f in TOOLS.items()
]  # fmt: skip


def call_tool(name: str, call_id: str, arguments: str) -> str:
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
                  "gen_ai.tool.call.arguments": arguments}  # fmt: skip
    with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes) as span:
        try:
            result = TOOLS[name](**json.loads(arguments))
        except ValueError as exc:  # the error goes back to the model
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
            span.set_attribute("error.type", type(exc).__name__)
            return f"Error: {exc}"
        span.set_attribute("gen_ai.tool.call.result", result)
        return result


attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": c.AGENT_NAME}
with tracer.start_as_current_span(f"invoke_agent {c.AGENT_NAME}", attributes=attributes):
    messages: list = [{"role": "user", "content": c.QUESTION}]
    while True:
        reply = (
            client.chat.completions.create(model=c.MODEL, messages=messages, tools=SCHEMAS).choices[0].message
        )
        if not reply.tool_calls:
            print(reply.content)
            break
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            result = call_tool(call.function.name, call.id, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
provider.shutdown()
