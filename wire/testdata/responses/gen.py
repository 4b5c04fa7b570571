"""gen.py writes the vLLM, SGLang and OpenAI reference fixtures of this directory
(SOURCES.md says from which sources): python3 gen.py, here."""
import json
def d(o): return json.dumps(o, separators=(',',':'), ensure_ascii=False)
def ev(typ, o): return "event: %s\ndata: %s\n\n" % (typ, d(o))

# ---- vLLM: simple (non-Harmony) streaming with a reasoning parser ----
out=[]; seq=[0]
rs="5c0f7c1e9a3b4d2e8f6a7b8c9d0e1f2a"; msg="7d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a"
def vresp(status, output, usage):
    return {"id":"resp_3f2a9c7e1b5d4e6f8a0b2c4d6e8f0a1b","created_at":1764892800,"incomplete_details":None,"instructions":None,"metadata":None,"model":"Qwen/Qwen3-0.6B","object":"response","output":output,"parallel_tool_calls":True,"temperature":0.0,"tool_choice":"auto","tools":[],"top_p":1.0,"background":False,"max_output_tokens":7,"max_tool_calls":None,"previous_response_id":None,"prompt":None,"reasoning":None,"service_tier":"auto","status":status,"text":None,"top_logprobs":None,"truncation":"disabled","usage":usage,"user":None,"input_messages":None,"output_messages":None}
def E(typ, **kw):
    # An openai-python event model: its fields in alphabetical order, as its generated
    # code declares them, sequence_number and type among them.
    o={}
    keys=sorted(list(kw.keys())+["sequence_number","type"])
    for k in keys:
        if k=="sequence_number": o[k]=seq[0]
        elif k=="type": o[k]=typ
        else: o[k]=kw[k]
    seq[0]+=1
    out.append(ev(typ,o))
def reasoning_item(status, content=None):
    return {"id":rs,"summary":[],"type":"reasoning","content":content,"encrypted_content":None,"status":status}
def text_part(text, logprobs): return {"annotations":[],"text":text,"type":"output_text","logprobs":logprobs}
def message(status, content): return {"id":msg,"content":content,"role":"assistant","status":status,"type":"message"}
E("response.created", response=vresp("in_progress", [], None))
E("response.in_progress", response=vresp("in_progress", [], None))
E("response.output_item.added", item=reasoning_item("in_progress"), output_index=0)
E("response.content_part.added", content_index=0, item_id=rs, output_index=0, part={"text":"","type":"reasoning_text"})
R=["Okay", ", the", " user"]
for r in R: E("response.reasoning_text.delta", content_index=0, delta=r, item_id=rs, output_index=0)
rtext="".join(R)
E("response.reasoning_text.done", content_index=0, item_id=rs, output_index=0, text=rtext)
E("response.content_part.done", content_index=0, item_id=rs, output_index=0, part={"text":rtext,"type":"reasoning_text"})
E("response.output_item.done", item=reasoning_item("completed",[{"text":rtext,"type":"reasoning_text"}]), output_index=0)
E("response.output_item.added", item=message("in_progress",[]), output_index=1)
E("response.content_part.added", content_index=0, item_id=msg, output_index=1, part=text_part("",[]))
A=["Hello", "!\n", " \"Hi\"", " there"]
for a in A: E("response.output_text.delta", content_index=0, delta=a, item_id=msg, logprobs=[], output_index=1)
atext="".join(A)
E("response.output_text.done", content_index=0, item_id=msg, logprobs=[], output_index=1, text=atext)
E("response.content_part.done", content_index=0, item_id=msg, output_index=1, part=text_part(atext,None))
E("response.output_item.done", item=message("completed",[text_part(atext,None)]), output_index=1)
usage={"input_tokens":12,"input_tokens_details":{"cached_tokens":0,"input_tokens_per_turn":[],"cached_tokens_per_turn":[]},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":3,"tool_output_tokens":0,"output_tokens_per_turn":[],"tool_output_tokens_per_turn":[]},"total_tokens":19}
E("response.completed", response=vresp("completed",[reasoning_item("completed",[{"text":rtext,"type":"reasoning_text"}]), message("completed",[text_part(atext,None)])], usage))
open("vllm-reasoning.sse","w").write("".join(out))

# ---- vLLM: a function call (tool parser, no reasoning) ----
out.clear(); seq[0]=0
fc="9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b"; call="call_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d"
def vresp2(status, output, usage):
    r=vresp(status, output, usage); r["max_output_tokens"]=16
    r["tools"]=[{"name":"tool_0","parameters":{"type":"object","properties":{}},"strict":None,"type":"function","description":"the tool"}]
    return r
E("response.created", response=vresp2("in_progress", [], None))
E("response.in_progress", response=vresp2("in_progress", [], None))
def fc_item(status, args): return {"arguments":args,"call_id":call,"name":"tool_0","type":"function_call","id":fc,"status":status}
E("response.output_item.added", item=fc_item("in_progress", "{\""), output_index=0)
ARGS=["{\"", "city", "\": \"", "Paris", "\"}"]
for a in ARGS: E("response.function_call_arguments.delta", delta=a, item_id=fc, output_index=0)
args="".join(ARGS)
E("response.function_call_arguments.done", arguments=args, item_id=fc, name="tool_0", output_index=0)
E("response.output_item.done", item={"arguments":args,"call_id":call,"name":"tool_0","type":"function_call","id":fc,"status":"completed"}, output_index=0)
usage={"input_tokens":40,"input_tokens_details":{"cached_tokens":32,"input_tokens_per_turn":[],"cached_tokens_per_turn":[]},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":0,"tool_output_tokens":0,"output_tokens_per_turn":[],"tool_output_tokens_per_turn":[]},"total_tokens":49}
E("response.completed", response=vresp2("completed",[{"arguments":args,"call_id":call,"name":"tool_0","type":"function_call","id":fc,"status":"completed"}], usage))
open("vllm-function-call.sse","w").write("".join(out))

# ---- SGLang: non-Harmony streaming with a reasoning parser ----
out.clear(); seq[0]=0
it0="item_0f1e2d3c4b5a69788796a5b4c3d2e1f0"; it1="item_a1b2c3d4e5f60718293a4b5c6d7e8f90"
def sresp(status, output, usage):
    return {"id":"resp_c0ffee00c0ffee00c0ffee00c0ffee00","created_at":1764892800.0,"error":None,"incomplete_details":None,"instructions":None,"metadata":{},"model":"Qwen/Qwen3-0.6B","object":"response","output":output,"parallel_tool_calls":True,"temperature":0.0,"tool_choice":"auto","tools":[],"top_p":None,"max_output_tokens":7,"previous_response_id":None,"reasoning":{"effort":None,"generate_summary":None,"summary":None},"status":status,"text":None,"truncation":"disabled","usage":usage,"user":None,"store":False}
E("response.created", response=sresp("in_progress", [], None))
E("response.in_progress", response=sresp("in_progress", [], None))
E("response.output_item.added", item={"id":it0,"summary":[],"type":"reasoning","content":None,"encrypted_content":None,"status":"in_progress"}, output_index=0)
E("response.reasoning_summary_part.added", item_id=it0, output_index=0, part={"text":"","type":"summary_text"}, summary_index=0)
R=["Let", " me", " think"]
for r in R: E("response.reasoning_summary_text.delta", delta=r, item_id=it0, output_index=0, summary_index=0)
rtext="".join(R)
E("response.reasoning_summary_text.done", item_id=it0, output_index=0, summary_index=0, text=rtext)
E("response.reasoning_summary_part.done", item_id=it0, output_index=0, part={"text":rtext,"type":"summary_text"}, summary_index=0)
ritem={"id":it0,"summary":[{"text":rtext,"type":"summary_text"}],"type":"reasoning","content":None,"encrypted_content":None,"status":"completed"}
E("response.output_item.done", item=ritem, output_index=0)
E("response.output_item.added", item={"id":it1,"content":[],"role":"assistant","status":"in_progress","type":"message"}, output_index=1)
E("response.content_part.added", content_index=0, item_id=it1, output_index=1, part={"annotations":[],"text":"","type":"output_text","logprobs":None})
A=["Bonjour", " à", " tous", "."]
for a in A: E("response.output_text.delta", content_index=0, delta=a, item_id=it1, logprobs=[], output_index=1)
atext="".join(A)
part={"annotations":[],"text":atext,"type":"output_text","logprobs":None}
E("response.content_part.done", content_index=0, item_id=it1, output_index=1, part=part)
mitem={"id":it1,"content":[part],"role":"assistant","status":"completed","type":"message"}
E("response.output_item.done", item=mitem, output_index=1)
usage={"input_tokens":12,"input_tokens_details":{"cached_tokens":4,"cache_write_tokens":0},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":3},"total_tokens":19}
E("response.completed", response=sresp("completed",[ritem,mitem],usage))
open("sglang-reasoning.sse","w").write("".join(out))

# ---- OpenAI's reference: reasoning summary, then a function call, cut by max_output_tokens ----
out.clear(); seq[0]=0
def oresp(status, output, usage, incomplete=None):
    return {"id":"resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b","object":"response","created_at":1741476542,"status":status,"error":None,"incomplete_details":incomplete,"instructions":None,"max_output_tokens":64,"model":"o4-mini-2025-04-16","output":output,"parallel_tool_calls":True,"previous_response_id":None,"reasoning":{"effort":"medium","summary":"auto"},"store":False,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[{"type":"function","description":"the tool","name":"tool_0","parameters":{"type":"object","properties":{}},"strict":True}],"top_p":1.0,"truncation":"disabled","usage":usage,"user":None,"metadata":{}}
def O(typ, **kw):
    o={"type":typ,"sequence_number":seq[0]}; o.update(kw); seq[0]+=1
    out.append(ev(typ,o))
rsid="rs_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b"; fcid="fc_67ccd3164d948190b2e8ed41f68b7ef80bb6a6b452d3795b"
O("response.created", response=oresp("in_progress",[],None))
O("response.in_progress", response=oresp("in_progress",[],None))
O("response.output_item.added", output_index=0, item={"id":rsid,"type":"reasoning","summary":[]})
O("response.reasoning_summary_part.added", item_id=rsid, output_index=0, summary_index=0, part={"type":"summary_text","text":""})
R=["**Checking", " the", " weather**"]
for r in R: O("response.reasoning_summary_text.delta", item_id=rsid, output_index=0, summary_index=0, delta=r, obfuscation="x9Q")
rtext="".join(R)
O("response.reasoning_summary_text.done", item_id=rsid, output_index=0, summary_index=0, text=rtext)
O("response.reasoning_summary_part.done", item_id=rsid, output_index=0, summary_index=0, part={"type":"summary_text","text":rtext})
ritem={"id":rsid,"type":"reasoning","summary":[{"type":"summary_text","text":rtext}]}
O("response.output_item.done", output_index=0, item=ritem)
O("response.output_item.added", output_index=1, item={"id":fcid,"type":"function_call","status":"in_progress","arguments":"","call_id":"call_zXh0wRa1aXfUY0yGdmTxrKPz","name":"tool_0"})
ARGS=["{\"", "location", "\":\"", "Paris"]
for a in ARGS: O("response.function_call_arguments.delta", item_id=fcid, output_index=1, delta=a, obfuscation="kQ")
usage={"input_tokens":81,"input_tokens_details":{"cached_tokens":64},"output_tokens":64,"output_tokens_details":{"reasoning_tokens":56},"total_tokens":145}
fitem={"id":fcid,"type":"function_call","status":"incomplete","arguments":"".join(ARGS),"call_id":"call_zXh0wRa1aXfUY0yGdmTxrKPz","name":"tool_0"}
O("response.incomplete", response=oresp("incomplete",[ritem,fitem],usage,{"reason":"max_output_tokens"}))
open("openai-reference.sse","w").write("".join(out))
