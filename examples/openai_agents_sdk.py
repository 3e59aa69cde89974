"""An OpenAI Agents SDK agent with a function tool, served through dynbranch: only the client's
base URL and key and the (optional) workflow headers differ from an agent pointed at OpenAI.

    dynbranch up --engines 2 --time-scale 0.01      # in one shell; it prints the API's URL
    DYNBRANCH_BASE_URL=http://127.0.0.1:PORT/v1 python examples/openai_agents_sdk.py

On the default simulated engines the model is a model of an engine: it calls the offered tool
with schema-valid arguments, then answers in pseudo-text.
"""

from __future__ import annotations

import asyncio
import os
import sys

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI


@function_tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"{city}: 18 C, light rain"


async def main() -> int:
    base_url = os.environ.get("DYNBRANCH_BASE_URL")
    if not base_url:
        print("set DYNBRANCH_BASE_URL to the URL `dynbranch up` prints (http://HOST:PORT/v1)",
              file=sys.stderr)
        return 2
    set_tracing_disabled(True)  # traces would go to OpenAI's platform
    async with AsyncOpenAI(
        base_url=base_url,                                        # 1. the gateway
        api_key=os.environ.get("DYNBRANCH_API_KEY", "unused"),    # 2. its key
        default_headers={"x-dynbranch-workflow-id": "weather-agent-1"},  # 3. optional tags
    ) as client:
        model = OpenAIChatCompletionsModel(model=os.environ.get("DYNBRANCH_MODEL", "qwen3-32b"),
                                           openai_client=client)     # 4. chat completions
        agent = Agent(name="weather", instructions="Answer with the tool's help.",
                      tools=[get_weather], model=model)
        result = await Runner.run(agent, "What is the weather in Oslo?")
    for item in result.new_items:
        print(f"{item.type:>22} {str(getattr(item, 'raw_item', ''))[:70]}")
    print("final:", result.final_output)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
