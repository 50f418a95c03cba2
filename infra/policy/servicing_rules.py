"""cfn-lint rules for what the local engines do not enforce (issue #15).

MiniStack and DynamoDB Local accept templates AWS refuses or runs badly: FIFO sends without a
deduplication id, event targets that drop what they cannot deliver, alarms nobody hears,
reservations a new account's quota refuses, visibility timeouts shorter than a retry, KMS
permissions nobody checks, IAM grants nobody uses. Each rule below is one of those, checked
over `template.yaml` by cfn-lint (`infra/check-template.sh` runs them with `--append-rules`
and proves each one fails on the template that had the problem: `fixtures/template-as-filed.yaml`
for every rule, and each later issue's cut-down fixture for the rules its first line names).

cfn-lint validates the SAM template with Globals merged (no SAM transform), so the rules read
SAM resources; what SAM adds to each function's role is listed in the README ("Permissions").

E9115-E9123 (issue #22): the alarms that page on what matters (duplicates, their money,
quarantines, the reconciler's findings) and the evidence kept for the audit horizon (every
consumer's decision records, archived write-once and queryable). A resource behind a
condition counts only when the condition holds with the default parameters.

E9131 (issue #30): an SQS consumer's timeout is one AWS allows and fits a request beside the
answer reserve account-state derives from it.

E9132 (issue #31): each role's table grants are exactly its declared (action, key prefix) pairs
(infra/policy/table-access.json, which tests/it/privileges.rs holds the code to). E9133: the
servicing bus admits only the relay's role, and that role only the relay's sources. E9134: KMS
only through services (kms:ViaService; through Secrets Manager, Decrypt only, bound to the secret); the evidence subscription role trusts only its log groups. E9135: queues and topics refuse
plain transport; the table has deletion protection. E9137: the evidence archive has its own KMS
key, which only the break-glass role may disable, delete or re-police. E9138: the evidence
queries run in a workgroup that enforces its settings and encrypts results with a KMS key, into a
bucket that forgets them. E9141: the bus and its archive are encrypted under the template's
key, which EventBridge may use only under their encryption context, and the bus keeps what it
cannot decrypt in a dead-letter queue that admits it, under another key. E9142: every secret of
the template is read only by the roles granted it and changed or deleted only by break-glass
(its resource policy). E9143: a read the declaration confines to some attributes is granted
only with exactly those (dynamodb:Attributes and dynamodb:Select). E9139 (issue #32): every API Gateway route is authorized, and an extra
endpoint of a function (the optional JWT one) serves exactly its HttpApi events' routes.

E9124-E9130 (issue #24, "failures that page nobody"): the API's 5xx answers and latency, queues
whose oldest message ages (a stalled or retrying consumer), sustained retries, a quarantine alarm
for every consumer the template has, Lambda's REPORT lines kept (system logs at INFO), and every
alarm linking its runbook entry (${RunbookUrl}#<alarm logical id, lower case>: docs/runbook.md as
the deployer publishes it).
"""

from __future__ import annotations

import json
import pathlib
import re
import tomllib

from cfnlint.rules import CloudFormationLintRule, RuleMatch

ROOT = pathlib.Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ template helpers


def resources(cfn, kind=None):
    for name, res in (cfn.template.get("Resources") or {}).items():
        if isinstance(res, dict) and (kind is None or res.get("Type") == kind):
            yield name, res


def props(res):
    return res.get("Properties") or {}


def logical_id(value):
    """The resource a Ref / GetAtt points at (None for anything else)."""
    if isinstance(value, dict):
        if "Ref" in value and isinstance(value["Ref"], str):
            return value["Ref"]
        if "Fn::GetAtt" in value:
            att = value["Fn::GetAtt"]
            if isinstance(att, str):
                return att.split(".")[0]
            if isinstance(att, list) and att:
                return att[0]
    return None


def as_list(value):
    return value if isinstance(value, list) else [value]


def parameter(cfn, value):
    if isinstance(value, dict) and isinstance(value.get("Ref"), str):
        return (cfn.template.get("Parameters") or {}).get(value["Ref"])
    return None


def number(cfn, value, bound="MaxValue"):
    """A literal number, or a parameter's bound (its largest value by default)."""
    param = parameter(cfn, value)
    if param is not None:
        value = param.get(bound, param.get("Default"))
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def evaluate_condition(cfn, expr):
    """A condition's value with every parameter at its default (None when unknown)."""
    conditions = cfn.template.get("Conditions") or {}

    def value(v):
        param = parameter(cfn, v)
        if param is not None:
            return str(param.get("Default", ""))
        return v if isinstance(v, str) else None

    def ev(e):
        if isinstance(e, str):
            return ev(conditions.get(e))
        if not isinstance(e, dict) or len(e) != 1:
            return None
        (op, args), = e.items()
        if op == "Condition":
            return ev(conditions.get(args))
        if op == "Fn::Equals":
            a, b = (value(x) for x in args)
            return None if a is None or b is None else a == b
        if op == "Fn::Not":
            inner = ev(args[0])
            return None if inner is None else not inner
        if op in ("Fn::And", "Fn::Or"):
            vals = [ev(x) for x in args]
            if None in vals:
                return None
            return all(vals) if op == "Fn::And" else any(vals)
        return None

    return ev(expr)


def is_no_value(v):
    return isinstance(v, dict) and v.get("Ref") == "AWS::NoValue"


def off_by_default(cfn, value):
    """`value` is `!If [condition, x, !Ref AWS::NoValue]` with the condition false by default."""
    return (
        isinstance(value, dict) and "Fn::If" in value
        and is_no_value(value["Fn::If"][2])
        and evaluate_condition(cfn, value["Fn::If"][0]) is False
    )


def functions(cfn):
    yield from resources(cfn, "AWS::Serverless::Function")


def function_role(cfn, fn):
    """The explicit role a function names (`Role: !GetAtt X.Arn`), if any."""
    role = (cfn.template.get("Resources") or {}).get(logical_id(props(fn).get("Role")))
    return role if isinstance(role, dict) and role.get("Type") == "AWS::IAM::Role" else None


def statements(cfn, fn):
    """What a function's role allows: its explicit role's inline statements, or the statements
    of its SAM Policies (templates and names are refused elsewhere)."""
    role = function_role(cfn, fn)
    if role is not None:
        yield from role_statements(role)
        return
    for policy in as_list(props(fn).get("Policies") or []):
        if isinstance(policy, dict) and "Statement" in policy:
            for st in as_list(policy["Statement"]):
                if isinstance(st, dict):
                    yield st


def actions(statement):
    return [a for a in as_list(statement.get("Action") or []) if isinstance(a, str)]


def covers(granted, action):
    """Whether the actions `granted` (an IAM action list, `service:Prefix*` wildcards) cover `action`."""
    return any(a == action or (a.endswith("*") and action.startswith(a[:-1])) for a in granted)


def grants(cfn, fn_or_role_statements, action, resource_id):
    """Whether some statement allows `action` on the resource `resource_id`."""
    for st in fn_or_role_statements:
        if st.get("Effect") != "Allow":
            continue
        if not covers(actions(st), action):
            continue
        if any(logical_id(r) == resource_id or r == "*" for r in as_list(st.get("Resource"))):
            return True
    return False


def role_statements(role):
    for policy in as_list(props(role).get("Policies") or []):
        doc = policy.get("PolicyDocument") or {}
        for st in as_list(doc.get("Statement") or []):
            if isinstance(st, dict):
                yield st


def events_of(fn, *types):
    for name, ev in (props(fn).get("Events") or {}).items():
        if isinstance(ev, dict) and ev.get("Type") in types:
            yield name, ev.get("Properties") or {}


def queue(cfn, value):
    name = logical_id(value)
    res = (cfn.template.get("Resources") or {}).get(name)
    if isinstance(res, dict) and res.get("Type") == "AWS::SQS::Queue":
        return name, res
    return name, None


def is_fifo(q):
    return str(props(q).get("FifoQueue", "false")).lower() == "true"


class ServicingRule(CloudFormationLintRule):
    tags = ["servicing"]
    source_url = "https://github.com/aws-cloudformation/cfn-lint/blob/main/docs/custom_rules.md"

    def problem(self, path, message):
        return RuleMatch(path, message)


# ------------------------------------------------------------------ the rules


class FifoSendsAreDeduplicated(ServicingRule):
    id = "E9101"
    shortdesc = "Every send to a FIFO queue carries a deduplication id"
    description = (
        "An EventBridge rule or pipe target cannot set a MessageDeduplicationId per event; AWS "
        "refuses (and drops) such sends to a FIFO queue without content-based deduplication."
    )

    def match(self, cfn):
        out = []
        for name, rule in resources(cfn, "AWS::Events::Rule"):
            for i, target in enumerate(as_list(props(rule).get("Targets") or [])):
                qname, q = queue(cfn, target.get("Arn"))
                if q is not None and is_fifo(q) and str(props(q).get("ContentBasedDeduplication", "false")).lower() != "true":
                    out.append(self.problem(
                        ["Resources", name, "Properties", "Targets", i],
                        f"{name} targets the FIFO queue {qname}, which has no content-based deduplication: "
                        "EventBridge cannot set a deduplication id, so AWS refuses these sends",
                    ))
        return out


class EventTargetsHaveDeadLetters(ServicingRule):
    id = "E9102"
    shortdesc = "Every EventBridge target and schedule has a retry policy, a standard DLQ and alarms"
    description = (
        "Without DeadLetterConfig, EventBridge drops an event after its retries; without alarms "
        "on FailedInvocations and the DLQ's depth nobody knows."
    )

    def match(self, cfn):
        out = []
        alarms = [props(a) for _, a in resources(cfn, "AWS::CloudWatch::Alarm")]

        def dlq_problems(path, owner, cfg):
            dlq = (cfg.get("DeadLetterConfig") or {}).get("Arn")
            if cfg.get("RetryPolicy") is None:
                out.append(self.problem(path, f"{owner} has no RetryPolicy"))
            if dlq is None:
                out.append(self.problem(path, f"{owner} has no DeadLetterConfig: an undeliverable event is dropped"))
                return
            qname, q = queue(cfn, dlq)
            if q is None or is_fifo(q):
                out.append(self.problem(path, f"{owner}'s dead-letter queue must be a standard SQS queue of this stack"))
                return
            watched = any(
                a.get("MetricName") == "ApproximateNumberOfMessagesVisible"
                and any(logical_id(d.get("Value")) == qname for d in as_list(a.get("Dimensions") or []))
                for a in alarms
            )
            if not watched:
                out.append(self.problem(path, f"no alarm watches the depth of {qname}, {owner}'s dead-letter queue"))

        for name, rule in resources(cfn, "AWS::Events::Rule"):
            rule_name = props(rule).get("Name")
            for i, target in enumerate(as_list(props(rule).get("Targets") or [])):
                dlq_problems(["Resources", name, "Properties", "Targets", i], f"{name}'s target", target)
            failed = [
                a for a in alarms
                if a.get("MetricName") == "FailedInvocations"
                and any(d.get("Name") == "RuleName" and rule_name is not None and d.get("Value") == rule_name
                        for d in as_list(a.get("Dimensions") or []))
            ]
            if not failed:
                out.append(self.problem(
                    ["Resources", name],
                    f"no FailedInvocations alarm names {name} (give the rule a Name and alarm on it)",
                ))
        for name, fn in functions(cfn):
            for ev_name, ev in events_of(fn, "Schedule", "ScheduleV2", "EventBridgeRule", "CloudWatchEvent"):
                dlq_problems(["Resources", name, "Properties", "Events", ev_name], f"{name}'s {ev_name} event", ev)
        return out


class AlarmsHaveActions(ServicingRule):
    id = "E9103"
    shortdesc = "Every alarm notifies someone"
    description = "An alarm without AlarmActions changes state in a console nobody watches."

    def match(self, cfn):
        return [
            self.problem(["Resources", name, "Properties"], f"{name} has no AlarmActions")
            for name, alarm in resources(cfn, "AWS::CloudWatch::Alarm")
            if not props(alarm).get("AlarmActions")
        ]


class NoReservationByDefault(ServicingRule):
    id = "E9104"
    shortdesc = "No reserved concurrency with the default parameters"
    description = (
        "New accounts get a reduced concurrency quota; reservations that exceed it fail the "
        "first deploy. Reserve only behind a condition that is false by default."
    )

    def match(self, cfn):
        out = []
        for name, fn in functions(cfn):
            reserved = props(fn).get("ReservedConcurrentExecutions")
            if reserved is None:
                continue
            if not off_by_default(cfn, reserved):
                out.append(self.problem(
                    ["Resources", name, "Properties", "ReservedConcurrentExecutions"],
                    f"{name} reserves concurrency with the default parameters",
                ))
        return out


class VisibilityCoversRetries(ServicingRule):
    id = "E9105"
    shortdesc = "A queue's visibility timeout is at least 6 x its consumer's timeout + batch window"
    description = (
        "Lambda's guidance for SQS sources: a shorter visibility timeout lets a message be "
        "delivered again while its first delivery is still running."
    )

    def match(self, cfn):
        out = []
        for name, fn in functions(cfn):
            timeout = number(cfn, props(fn).get("Timeout", 3))
            for ev_name, ev in events_of(fn, "SQS"):
                qname, q = queue(cfn, ev.get("Queue"))
                if q is None:
                    continue
                window = number(cfn, ev.get("MaximumBatchingWindowInSeconds", 0))
                visibility = number(cfn, props(q).get("VisibilityTimeout", 30))
                if window is None or timeout is None or visibility is None:
                    out.append(self.problem(["Resources", name, "Properties", "Events", ev_name],
                                            f"{name}/{ev_name}: timeout, window or visibility is not bounded"))
                    continue
                needed = 6 * timeout + window
                if visibility < needed:
                    out.append(self.problem(
                        ["Resources", qname, "Properties", "VisibilityTimeout"],
                        f"{qname} hides a message {visibility:.0f} s; {name} needs at least "
                        f"6 x {timeout:.0f} s + a {window:.0f} s window = {needed:.0f} s",
                    ))
        return out


class DeadLettersOutliveTheirSource(ServicingRule):
    id = "E9106"
    shortdesc = "A dead-letter queue keeps messages longer than its source"
    description = (
        "SQS ages a dead letter from its first enqueue; a DLQ that keeps no longer than its "
        "source may drop a message the moment it arrives."
    )

    def match(self, cfn):
        out = []
        for name, q in resources(cfn, "AWS::SQS::Queue"):
            redrive = props(q).get("RedrivePolicy")
            if not isinstance(redrive, dict):
                continue
            dname, dlq = queue(cfn, redrive.get("deadLetterTargetArn"))
            if dlq is None:
                continue
            source = number(cfn, props(q).get("MessageRetentionPeriod", 345600))
            kept = number(cfn, props(dlq).get("MessageRetentionPeriod", 345600))
            if kept is None or source is None or kept <= source:
                out.append(self.problem(
                    ["Resources", dname, "Properties", "MessageRetentionPeriod"],
                    f"{dname} keeps messages {kept} s, not longer than its source {name} ({source} s)",
                ))
        return out


class EncryptedQueueProducersCanEncrypt(ServicingRule):
    id = "E9107"
    shortdesc = "Whoever sends to a KMS-encrypted queue may use its key"
    description = (
        "A send to a queue encrypted with a customer key needs kms:GenerateDataKey on that key; "
        "without it the send fails (for a function's DLQ: silently, at the worst moment)."
    )

    def match(self, cfn):
        out = []
        queues = {n: q for n, q in resources(cfn, "AWS::SQS::Queue") if logical_id(props(q).get("KmsMasterKeyId"))}
        key_of = {n: logical_id(props(q).get("KmsMasterKeyId")) for n, q in queues.items()}
        all_res = cfn.template.get("Resources") or {}

        def check(path, who, sts, qname):
            if qname in queues and not grants(cfn, sts, "kms:GenerateDataKey", key_of[qname]):
                out.append(self.problem(path, f"{who} sends to {qname} but may not kms:GenerateDataKey on {key_of[qname]}"))

        for name, fn in functions(cfn):
            sts = list(statements(cfn, fn))
            path = ["Resources", name, "Properties", "Policies"]
            dlq = props(fn).get("DeadLetterQueue") or {}
            check(path, f"{name} (its DeadLetterQueue)", sts, logical_id(dlq.get("TargetArn")))
            for st in sts:
                if "sqs:SendMessage" in actions(st):
                    for r in as_list(st.get("Resource")):
                        check(path, name, sts, logical_id(r))
            for _, ev in events_of(fn, "DynamoDB", "Kinesis", "SQS"):
                dest = ((ev.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination")
                check(path, f"{name} (its stream failure destination)", sts, logical_id(dest))
            for ev_name, ev in events_of(fn, "ScheduleV2"):
                dlq = logical_id((ev.get("DeadLetterConfig") or {}).get("Arn"))
                role = all_res.get(logical_id(ev.get("RoleArn")))
                role_sts = list(role_statements(role)) if isinstance(role, dict) else []
                check(["Resources", name, "Properties", "Events", ev_name], f"{name}'s {ev_name} schedule role", role_sts, dlq)
        # Service principals (EventBridge) deliver under the key policy.
        for qpname, qp in resources(cfn, "AWS::SQS::QueuePolicy"):
            for st in as_list((props(qp).get("PolicyDocument") or {}).get("Statement") or []):
                principal = st.get("Principal")
                if st.get("Effect") != "Allow" or not isinstance(principal, dict):
                    continue  # a Deny (e.g. TLS only) or "*" sends nothing for a service
                service = principal.get("Service")
                for r in as_list(st.get("Resource")):
                    qname = logical_id(r)
                    if qname not in queues or service is None:
                        continue
                    key = all_res.get(key_of[qname]) or {}
                    key_sts = as_list((props(key).get("KeyPolicy") or {}).get("Statement") or [])
                    allowed = any(
                        (s.get("Principal") or {}).get("Service") == service
                        and any(a in ("kms:GenerateDataKey", "kms:GenerateDataKey*") for a in actions(s))
                        for s in key_sts
                    )
                    if not allowed:
                        out.append(self.problem(["Resources", qpname],
                                                f"{service} sends to {qname} but {key_of[qname]}'s key policy does not let it GenerateDataKey"))
        return out


# SDK operations (the fluent builder's name) and the IAM actions they need.
SDK_ACTIONS = {
    "get_item": ["dynamodb:GetItem"],
    "put_item": ["dynamodb:PutItem"],
    "update_item": ["dynamodb:UpdateItem"],
    "delete_item": ["dynamodb:DeleteItem"],
    "query": ["dynamodb:Query"],
    "scan": ["dynamodb:Scan"],
    "batch_get_item": ["dynamodb:BatchGetItem"],
    "batch_write_item": ["dynamodb:BatchWriteItem"],
    "transact_get_items": ["dynamodb:GetItem"],
    # Each item of a transaction is authorised as its own action.
    "transact_write_items": ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"],
    "send_message": ["sqs:SendMessage"],
    "send_message_batch": ["sqs:SendMessage"],
    "put_events": ["events:PutEvents"],
    "get_secret_value": ["secretsmanager:GetSecretValue"],
}
# What Lambda itself does with the function's role, not the code: poll the queue or the
# stream, write the function's logs, traces, DLQ and failure destination, decrypt its
# environment.
SERVICE_ACTIONS = {
    "dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams",
    "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:ChangeMessageVisibility",
    "logs:CreateLogStream", "logs:PutLogEvents",
    "kms:Decrypt", "kms:GenerateDataKey",
}
# X-Ray has no resource-level permissions: "*" is the only resource these accept.
STAR_ONLY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
CALL = re.compile(r"\.(" + "|".join(SDK_ACTIONS) + r")\(\)")


def linked_crates(binary):
    """The workspace crates a function's binary links (path dependencies, transitively)."""
    workspace = tomllib.loads((ROOT / "Cargo.toml").read_text())
    paths = {n: ROOT / d["path"] for n, d in workspace["workspace"]["dependencies"].items()
             if isinstance(d, dict) and "path" in d}
    todo, seen = [ROOT / "functions" / binary], set()
    while todo:
        crate = todo.pop()
        if crate in seen or not (crate / "Cargo.toml").exists():
            continue
        seen.add(crate)
        deps = tomllib.loads((crate / "Cargo.toml").read_text()).get("dependencies", {})
        todo.extend(paths[n] for n in deps if n in paths)
    return seen


def callable_actions(binary):
    found = set()
    for crate in linked_crates(binary):
        for src in (crate / "src").rglob("*.rs"):
            for op in CALL.findall(src.read_text()):
                found.update(SDK_ACTIONS[op])
    return found


class FunctionsHoldOnlyWhatTheirCodeCalls(ServicingRule):
    id = "E9108"
    shortdesc = "Each function's IAM actions are ones its code calls, scoped to its own items"
    description = (
        "No wildcard actions or resources, no managed policies or policy templates, every "
        "granted action one the crates the binary links call (or Lambda performs for it), and "
        "every table item action confined to the function's key prefixes (dynamodb:LeadingKeys)."
    )

    def match(self, cfn):
        out = []
        for name, fn in functions(cfn):
            path = ["Resources", name, "Properties", "Policies"]
            role = function_role(cfn, fn)
            if role is None:
                out.append(self.problem(["Resources", name, "Properties"],
                                        f"{name} has no explicit Role: SAM's generated role attaches AWS managed policies on \"*\""))
            elif props(role).get("ManagedPolicyArns") is not None and not off_by_default(
                cfn, props(role)["ManagedPolicyArns"]
            ):
                out.append(self.problem(["Resources", logical_id(props(fn).get("Role"))],
                                        f"{name}'s role attaches managed policies with the default parameters"))
            for policy in as_list(props(fn).get("Policies") or []):
                if not (isinstance(policy, dict) and "Statement" in policy):
                    out.append(self.problem(path, f"{name} uses a managed policy or policy template ({policy!r}): write the statements"))
            binary = ((fn.get("Metadata") or {}).get("BuildProperties") or {}).get("Binary")
            callable_ = callable_actions(binary) if binary else set()
            # Lambda writes the function's DLQ and stream failure destination itself.
            lambda_writes = {logical_id((props(fn).get("DeadLetterQueue") or {}).get("TargetArn"))} | {
                logical_id(((ev.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination"))
                for _, ev in events_of(fn, "DynamoDB", "Kinesis", "SQS")
            }
            for st in statements(cfn, fn):
                sid = st.get("Sid", "?")
                by_lambda = {logical_id(r) for r in as_list(st.get("Resource"))} <= lambda_writes - {None}
                for action in actions(st):
                    if action == "sqs:SendMessage" and by_lambda:
                        continue
                    if "*" in action:
                        out.append(self.problem(path, f"{name}/{sid}: wildcard action {action}"))
                    elif action not in callable_ and action not in SERVICE_ACTIONS | STAR_ONLY_ACTIONS:
                        out.append(self.problem(path, f"{name}/{sid}: {action} is granted but no crate {binary} links calls it"))
                if any(r == "*" for r in as_list(st.get("Resource"))) and not set(actions(st)) <= STAR_ONLY_ACTIONS:
                    out.append(self.problem(path, f"{name}/{sid}: Resource \"*\""))
                item_actions = [a for a in actions(st) if a.startswith("dynamodb:") and a not in SERVICE_ACTIONS and a != "dynamodb:Scan"]
                # A Query of a sparse index is confined by what the index projects.
                resources = as_list(st.get("Resource"))
                if item_actions == ["dynamodb:Query"] and resources and all("/index/" in str(r) for r in resources):
                    item_actions = []
                leading = (st.get("Condition") or {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
                if item_actions and not leading:
                    out.append(self.problem(path, f"{name}/{sid}: {', '.join(item_actions)} without a dynamodb:LeadingKeys condition"))
        return out


class FifoSourcesUseHighThroughput(ServicingRule):
    id = "E9109"
    shortdesc = "A FIFO queue that feeds a function uses high-throughput mode"
    description = (
        "Deduplication and throughput per message group (DeduplicationScope messageGroup, "
        "FifoThroughputLimit perMessageGroupId): one busy account does not cap all others."
    )

    def match(self, cfn):
        out = []
        for name, fn in functions(cfn):
            for _, ev in events_of(fn, "SQS"):
                qname, q = queue(cfn, ev.get("Queue"))
                if q is None or not is_fifo(q):
                    continue
                p = props(q)
                if p.get("DeduplicationScope") != "messageGroup" or p.get("FifoThroughputLimit") != "perMessageGroupId":
                    out.append(self.problem(["Resources", qname, "Properties"], f"{qname} is not in high-throughput FIFO mode"))
        return out


class OutboundUrlsAreHttps(ServicingRule):
    id = "E9110"
    shortdesc = "A URL parameter a function calls must be https"
    description = "Customer data leaves the account only over TLS."

    def match(self, cfn):
        out = []
        for name, fn in functions(cfn):
            env = ((props(fn).get("Environment") or {}).get("Variables")) or {}
            for var, value in env.items():
                param = parameter(cfn, value)
                if var.endswith("_URL") and param is not None and "https://" not in str(param.get("AllowedPattern", "")):
                    out.append(self.problem(["Parameters", value["Ref"]], f"{value['Ref']} ({name}'s {var}) accepts non-https URLs"))
        return out


class StreamConsumersAlarmOnIteratorAge(ServicingRule):
    id = "E9111"
    shortdesc = "A stream consumer has an IteratorAge alarm and no reserved concurrency"
    description = (
        "A relay that falls behind its stream delays every downstream effect: say so, and never "
        "cap it below its shard count with a reservation (it runs one invocation per shard)."
    )

    def match(self, cfn):
        out = []
        alarms = [props(a) for _, a in resources(cfn, "AWS::CloudWatch::Alarm")]
        for name, fn in functions(cfn):
            if not list(events_of(fn, "DynamoDB", "Kinesis")):
                continue
            if not any(a.get("MetricName") == "IteratorAge"
                       and any(logical_id(d.get("Value")) == name for d in as_list(a.get("Dimensions") or []))
                       for a in alarms):
                out.append(self.problem(["Resources", name], f"no IteratorAge alarm on {name}"))
            if props(fn).get("ReservedConcurrentExecutions") is not None:
                out.append(self.problem(["Resources", name, "Properties", "ReservedConcurrentExecutions"],
                                        f"{name} reads a stream: a reservation below its shard count throttles it"))
        return out


class RetainedDataKeepsItsKey(ServicingRule):
    id = "E9112"
    shortdesc = "A retained table's KMS key is retained too, with an alias"
    description = "Deleting the stack must not leave a table nobody can decrypt."

    def match(self, cfn):
        out = []
        all_res = cfn.template.get("Resources") or {}
        aliases = {logical_id(props(a).get("TargetKeyId")) for _, a in resources(cfn, "AWS::KMS::Alias")}
        for name, table in resources(cfn, "AWS::DynamoDB::Table"):
            if table.get("DeletionPolicy") != "Retain":
                continue
            key = logical_id((props(table).get("SSESpecification") or {}).get("KMSMasterKeyId"))
            if key is None:
                continue
            if (all_res.get(key) or {}).get("DeletionPolicy") != "Retain":
                out.append(self.problem(["Resources", key], f"{name} is retained but its key {key} is not"))
            if key not in aliases:
                out.append(self.problem(["Resources", key], f"{key} has no alias"))
        return out


def env_of(fn):
    return ((props(fn).get("Environment") or {}).get("Variables")) or {}


def bounds(cfn, value):
    """`(least, largest, default)` a value may take: a literal's value three times, a Number
    parameter's MinValue, MaxValue and Default (None where the parameter sets no bound)."""
    param = parameter(cfn, value)

    def num(v):
        try:
            return float(v)
        except (TypeError, ValueError):
            return None

    if param is None:
        n = num(value)
        return n, n, n
    allowed = [num(v) for v in as_list(param.get("AllowedValues") or [])]
    if allowed and None not in allowed:
        return min(allowed), max(allowed), num(param.get("Default"))
    return num(param.get("MinValue")), num(param.get("MaxValue")), num(param.get("Default"))


# The contract's rule (docs/EVENTS.md, "How long a fact is remembered"): a claim outlives
# parking + the dead-letter queue + this margin. The same figure as account-state's
# CLAIM_RETENTION_MARGIN_DAYS (functions/account-state/src/config.rs).
CLAIM_MARGIN_DAYS = 7
# What the reconciler parks for when PARK_RETENTION_DAYS is unset (its code default).
DEFAULT_PARK_DAYS = 7
DAY = 86400


class ClaimsOutliveParkingAndDeadLetters(ServicingRule):
    id = "E9113"
    shortdesc = "No allowed parameters make a claim expire before its fact can come back"
    description = (
        "A fact comes back after parking (PARK_RETENTION_DAYS) or from its queue's dead-letter "
        "queue; a claim that expires first lets it apply twice. Rules cannot compare numbers, so "
        "the parameters' bounds must keep CLAIM_RETENTION_DAYS >= park + dead-letter retention "
        f"+ {CLAIM_MARGIN_DAYS} days for every allowed combination (and the defaults), and the "
        "consumer is given the park and dead-letter retention its cold-start check compares with."
    )

    def match(self, cfn):
        out = []
        fns = list(functions(cfn))
        parks = [(name, env_of(fn)["PARK_RETENTION_DAYS"]) for name, fn in fns if "PARK_RETENTION_DAYS" in env_of(fn)]
        for name, fn in fns:
            env = env_of(fn)
            if "CLAIM_RETENTION_DAYS" not in env or not list(events_of(fn, "SQS")):
                continue
            path = ["Resources", name, "Properties", "Environment", "Variables"]
            # Parking: the reconciler's (what it actually keeps), else the consumer's own.
            park_value = parks[0][1] if parks else env.get("PARK_RETENTION_DAYS", DEFAULT_PARK_DAYS)
            for var in ("PARK_RETENTION_DAYS", "DEAD_LETTER_RETENTION_DAYS"):
                if var not in env:
                    out.append(self.problem(path, f"{name} is not given {var}: its cold-start check of the claim retention compares with a default"))
            for other, value in parks:
                if "PARK_RETENTION_DAYS" in env and env["PARK_RETENTION_DAYS"] != value:
                    out.append(self.problem(path, f"{name}'s PARK_RETENTION_DAYS is not {other}'s: it checks its claims against another parking time"))
            # The dead-letter queues of the queues it consumes, in days.
            dead_letter_days = []
            for ev_name, ev in events_of(fn, "SQS"):
                _, q = queue(cfn, ev.get("Queue"))
                redrive = props(q).get("RedrivePolicy") if q is not None else None
                _, dlq = queue(cfn, redrive.get("deadLetterTargetArn")) if isinstance(redrive, dict) else (None, None)
                if dlq is None:
                    continue
                kept = number(cfn, props(dlq).get("MessageRetentionPeriod", 345600))
                if kept is None:
                    out.append(self.problem(["Resources", name, "Properties", "Events", ev_name], f"{name}/{ev_name}: its dead-letter retention is not bounded"))
                    continue
                dead_letter_days.append(kept / DAY)
            dead_letter = max(dead_letter_days, default=14)
            told = bounds(cfn, env.get("DEAD_LETTER_RETENTION_DAYS"))[0] if "DEAD_LETTER_RETENTION_DAYS" in env else None
            if told is not None and told != dead_letter:
                out.append(self.problem(path, f"{name}'s DEAD_LETTER_RETENTION_DAYS is {told:.0f}, its dead-letter queue keeps {dead_letter:g} days"))

            claim_min, _, claim_default = bounds(cfn, env["CLAIM_RETENTION_DAYS"])
            _, park_max, park_default = bounds(cfn, park_value)
            claim_param = logical_id(env["CLAIM_RETENTION_DAYS"]) or "CLAIM_RETENTION_DAYS"
            park_param = logical_id(park_value) or "PARK_RETENTION_DAYS"
            claim_path = ["Parameters", claim_param] if parameter(cfn, env["CLAIM_RETENTION_DAYS"]) else path
            if claim_min is None:
                out.append(self.problem(claim_path, f"{claim_param} has no MinValue: any claim retention is accepted"))
            if park_max is None:
                out.append(self.problem(["Parameters", park_param] if parameter(cfn, park_value) else path,
                                        f"{park_param} has no MaxValue: any parking time is accepted"))
            if claim_min is not None and park_max is not None:
                needed = park_max + dead_letter + CLAIM_MARGIN_DAYS
                if claim_min < needed:
                    out.append(self.problem(claim_path, (
                        f"{claim_param} accepts {claim_min:g} days, but {park_param} accepts up to {park_max:g}: "
                        f"a claim must last parking + the {dead_letter:g}-day dead-letter queue + {CLAIM_MARGIN_DAYS} "
                        f"days = {needed:g} (make {claim_param}'s MinValue at least {needed:g}, or lower {park_param}'s MaxValue)"
                    )))
            if None not in (claim_default, park_default):
                needed = park_default + dead_letter + CLAIM_MARGIN_DAYS
                if claim_default < needed:
                    out.append(self.problem(claim_path, f"the defaults break it: {claim_param} {claim_default:g} < {park_param} {park_default:g} + {dead_letter:g} + {CLAIM_MARGIN_DAYS}"))
        return out


class ScheduledJobsRunOnceAndTheCloseReadsOnlyItsIndex(ServicingRule):
    id = "E9114"
    shortdesc = "Scheduled jobs are not retried and alarm on errors; the daily close reads only the arrears index"
    description = (
        "A scheduled job retried by Lambda runs twice and a failed one must page someone. The "
        "daily close (a scheduled function that may send to the servicing queue and Query the "
        "arrears index) must exist, and may neither Scan nor GetItem the table: it reads the sparse "
        "index of accounts in arrears, or a silent delinquent account never ages."
    )

    def match(self, cfn):
        out = []
        alarms = [props(a) for _, a in resources(cfn, "AWS::CloudWatch::Alarm")]
        close = None
        for name, fn in functions(cfn):
            if not list(events_of(fn, "ScheduleV2", "Schedule")):
                continue
            path = ["Resources", name, "Properties"]
            retries = (props(fn).get("EventInvokeConfig") or {}).get("MaximumRetryAttempts")
            if str(retries) != "0":
                out.append(self.problem(path, f"{name} runs on a schedule: EventInvokeConfig.MaximumRetryAttempts must be 0"))
            if not any(a.get("MetricName") == "Errors"
                       and any(logical_id(d.get("Value")) == name for d in as_list(a.get("Dimensions") or []))
                       for a in alarms):
                out.append(self.problem(path, f"no Errors alarm on the scheduled {name}"))
            sts = list(statements(cfn, fn))
            queries_arrears = any("dynamodb:Query" in actions(st)
                                  and any("/index/ArrearsIndex" in str(r) for r in as_list(st.get("Resource")))
                                  for st in sts)
            if queries_arrears and grants(cfn, sts, "sqs:SendMessage", "ServicingQueue"):
                close = name
                for st in sts:
                    if any(a in ("dynamodb:Scan", "dynamodb:GetItem", "dynamodb:*") for a in actions(st)):
                        out.append(self.problem(path, f"the daily close {name} may {actions(st)}: it reads only the arrears index"))
        if close is None:
            out.append(self.problem(["Resources"], "no daily close: a scheduled function that queries the arrears index and sends to ServicingQueue"))
        return out


# ------------------------------------------------------------------ issue #22: alarms and evidence

LOAN = "LoanServicing"
SCHEMA = ROOT / "docs" / "decision-record.schema.json"
# Event sources whose deliveries a function decides on (one decision record each); scheduled
# jobs print none.
DELIVERY_EVENTS = ("SQS", "DynamoDB", "Kinesis", "HttpApi", "Api", "EventBridgeRule", "CloudWatchEvent")


def on_by_default(cfn, res):
    """A resource exists with the default parameters (no condition, or one that holds)."""
    condition = res.get("Condition")
    return condition is None or evaluate_condition(cfn, condition) is not False


def text(value):
    """A string as written: a literal, a Fn::Sub's string, a Fn::Join of those (a Ref or GetAtt
    as `${X}`); None for anything else."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict) or len(value) != 1:
        return None
    if logical_id(value):
        return "${" + logical_id(value) + "}"
    (fn, arg), = value.items()
    if fn == "Fn::Sub":
        first = arg[0] if isinstance(arg, list) and arg else arg
        return first if isinstance(first, str) else None
    if fn == "Fn::Join" and isinstance(arg, list) and len(arg) == 2 and isinstance(arg[1], list):
        parts = [text(part) for part in arg[1]]
        return None if None in parts else str(arg[0]).join(parts)
    return None


def names(value, logical):
    """`value` is a Ref/GetAtt of `logical`, or a string naming it as ${logical} / ${logical.Attr}."""
    return logical_id(value) == logical or re.search(r"\$\{" + re.escape(logical) + r"[.}]", text(value) or "") is not None


def dimensions(dims):
    return {d.get("Name"): d.get("Value") for d in as_list(dims or []) if isinstance(d, dict)}


def watches(alarm, metric, **dims):
    """The alarm's own metric is LoanServicing `metric` with exactly these dimension values."""
    p = props(alarm)
    return p.get("Namespace") == LOAN and p.get("MetricName") == metric and dimensions(p.get("Dimensions")) == dims


def own_log_group(cfn, fn):
    """The logical id of the log group a function logs to (LoggingConfig.LogGroup), if it is one of the stack's."""
    lg = logical_id((props(fn).get("LoggingConfig") or {}).get("LogGroup"))
    res = (cfn.template.get("Resources") or {}).get(lg)
    return lg if isinstance(res, dict) and res.get("Type") == "AWS::Logs::LogGroup" else None


def account_state(cfn):
    for name, fn in functions(cfn):
        if ((fn.get("Metadata") or {}).get("BuildProperties") or {}).get("Binary") == "account-state":
            return name, fn
    return None, None


def truthy(value):
    return str(value).lower() == "true"


def archive_streams(cfn):
    """The Firehose streams the decision records are subscribed to (with the default parameters)."""
    all_res = cfn.template.get("Resources") or {}
    out = {}
    for _, sub in resources(cfn, "AWS::Logs::SubscriptionFilter"):
        dest = logical_id(props(sub).get("DestinationArn"))
        stream = all_res.get(dest)
        if on_by_default(cfn, sub) and isinstance(stream, dict) and stream.get("Type") == "AWS::KinesisFirehose::DeliveryStream":
            out[dest] = stream
    return out


def archive_buckets(cfn):
    return {
        logical_id((props(s).get("ExtendedS3DestinationConfiguration") or {}).get("BucketARN"))
        for s in archive_streams(cfn).values()
    } - {None}


def archive_tables(cfn):
    buckets = archive_buckets(cfn)
    return [
        (name, table) for name, table in resources(cfn, "AWS::Glue::Table")
        if on_by_default(cfn, table)
        and any(names((((props(table).get("TableInput") or {}).get("StorageDescriptor")) or {}).get("Location"), b) for b in buckets)
    ]


def uses(ids, expression, metric):
    """A metric-math expression uses the query that `ids` (metric name -> query id) names for `metric`."""
    return metric in ids and re.search(rf"\b{re.escape(ids[metric])}\b", expression) is not None


class DuplicateRatioHasAnAnomalyAlarm(ServicingRule):
    id = "E9115"
    shortdesc = "account-state's duplicate ratio pages through an anomaly-detection alarm"
    description = (
        "A fixed threshold on duplicates pages on every replay and misses a slow drift; the "
        "ratio Duplicate / (Applied + Duplicate + ...) against an ANOMALY_DETECTION_BAND does "
        "neither. AWS refuses SEARCH in alarms and anomaly models, so the ratio names its metrics."
    )

    def match(self, cfn):
        out = []
        found = False
        for name, alarm in resources(cfn, "AWS::CloudWatch::Alarm"):
            path = ["Resources", name, "Properties"]
            queries = {q.get("Id"): q for q in as_list(props(alarm).get("Metrics") or []) if isinstance(q, dict)}
            for qid, q in queries.items():
                if "SEARCH(" in str(q.get("Expression", "")).upper().replace(" ", ""):
                    out.append(self.problem(path + ["Metrics"], f"{name}/{qid}: AWS refuses a SEARCH expression in an alarm"))
            band = queries.get(props(alarm).get("ThresholdMetricId")) or {}
            m = re.match(r"\s*ANOMALY_DETECTION_BAND\(\s*(\w+)", str(band.get("Expression", "")))
            if not m:
                continue
            numerator, slash, denominator = str((queries.get(m.group(1)) or {}).get("Expression", "")).partition("/")
            ids = {}
            for qid, q in queries.items():
                metric = (q.get("MetricStat") or {}).get("Metric") or {}
                if metric.get("Namespace") == LOAN and dimensions(metric.get("Dimensions")) == {"Consumer": "account-state"}:
                    ids[metric.get("MetricName")] = qid
            if not (slash and uses(ids, numerator, "Duplicate") and uses(ids, denominator, "Duplicate")
                    and uses(ids, denominator, "Applied")):
                continue
            if props(alarm).get("ComparisonOperator") not in ("GreaterThanUpperThreshold", "LessThanLowerOrGreaterThanUpperThreshold"):
                out.append(self.problem(path, f"{name} does not page when the duplicate ratio rises above its band"))
            elif not on_by_default(cfn, alarm):
                out.append(self.problem(["Resources", name], f"{name} is not created with the default parameters"))
            else:
                found = True
        if not found:
            out.append(self.problem(["Resources"], (
                "no alarm pages on account-state's duplicate ratio: Duplicate / (Applied + Duplicate + ...) "
                "of LoanServicing, Consumer=account-state, above an ANOMALY_DETECTION_BAND (ThresholdMetricId)"
            )))
        return out


class DuplicateMoneyHasAMaterialityAlarm(ServicingRule):
    id = "E9116"
    shortdesc = "Money recognised as duplicate pages above a parameter threshold"
    description = (
        "A ratio says nothing about amounts: the Sum of DuplicateAmountMinor over "
        "[Consumer=account-state, Currency] pages above a threshold the deployer sets (a parameter)."
    )

    def match(self, cfn):
        out = []
        found = False
        for name, alarm in resources(cfn, "AWS::CloudWatch::Alarm"):
            p = props(alarm)
            dims = dimensions(p.get("Dimensions"))
            if not (p.get("Namespace") == LOAN and p.get("MetricName") == "DuplicateAmountMinor"
                    and set(dims) == {"Consumer", "Currency"} and dims["Consumer"] == "account-state"):
                continue
            path = ["Resources", name, "Properties"]
            if p.get("Statistic") != "Sum":
                out.append(self.problem(path, f"{name} must sum the duplicate amounts over its period"))
            elif parameter(cfn, p.get("Threshold")) is None:
                out.append(self.problem(path, f"{name}'s threshold is not a parameter: materiality is the deployer's to set"))
            elif p.get("ComparisonOperator") not in ("GreaterThanThreshold", "GreaterThanOrEqualToThreshold"):
                out.append(self.problem(path, f"{name} does not page above its threshold"))
            elif not on_by_default(cfn, alarm):
                out.append(self.problem(["Resources", name], f"{name} is not created with the default parameters"))
            else:
                found = True
        if not found:
            out.append(self.problem(["Resources"], (
                "no materiality alarm: Sum of DuplicateAmountMinor (LoanServicing, Consumer=account-state, "
                "Currency) above a parameter threshold"
            )))
        return out


# What must be attributable, from account-state's decision records: (what, leading key,
# aggregate, value).
CONTRIBUTORS = [
    ("top sources by duplicates", "$.sourceSystem", "Count", None),
    ("top accounts by duplicates", "$.accountId", "Count", None),
    ("top accounts by duplicate amount", "$.accountId", "Sum", "$.amountMinor"),
]


class DuplicatesHaveContributorInsights(ServicingRule):
    id = "E9117"
    shortdesc = "Contributor Insights names the sources and accounts behind duplicates"
    description = (
        "Enabled CloudWatchLogRule v1 rules over account-state's log group, filtered on "
        "verdict duplicate: top sources and accounts by count, top accounts by Sum of amountMinor."
    )

    def match(self, cfn):
        out = []
        fn_name, fn = account_state(cfn)
        lg = own_log_group(cfn, fn) if fn else None
        if lg is None:
            out.append(self.problem(["Resources", fn_name] if fn_name else ["Resources"],
                                    "account-state has no log group of its own (LoggingConfig.LogGroup) for Contributor Insights to read"))
        rules = []
        for name, rule in resources(cfn, "AWS::CloudWatch::InsightRule"):
            p = props(rule)
            try:
                body = json.loads(text(p.get("RuleBody")) or "")
            except ValueError:
                out.append(self.problem(["Resources", name, "Properties", "RuleBody"], f"{name}'s RuleBody is not a JSON string"))
                continue
            if not isinstance(body, dict):
                continue
            contribution = body.get("Contribution") or {}
            duplicates = any(f.get("Match") == "$.verdict" and "duplicate" in as_list(f.get("In") or [])
                             for f in as_list(contribution.get("Filters") or []) if isinstance(f, dict))
            ok = (
                body.get("Schema") == {"Name": "CloudWatchLogRule", "Version": 1}
                and lg is not None and any(names(g, lg) for g in as_list(body.get("LogGroupNames") or []))
                and duplicates and p.get("RuleState") == "ENABLED" and on_by_default(cfn, rule)
            )
            if ok:
                keys = as_list(contribution.get("Keys") or [])
                rules.append((keys[0] if keys else None, body.get("AggregateOn"), contribution.get("ValueOf")))
        for what, key, aggregate, value in CONTRIBUTORS:
            if (key, aggregate, value) not in rules:
                out.append(self.problem(["Resources"], (
                    f"no enabled Contributor Insights rule for {what}: CloudWatchLogRule v1 over account-state's "
                    f"log group, Filters $.verdict In [duplicate], Keys [{key}, ...], AggregateOn {aggregate}"
                    + (f", ValueOf {value}" if value else "")
                )))
        return out


class _PagesOnReported(ServicingRule):
    """Every (metric, consumer) in `required` has an alarm paging as soon as it is above 0."""

    required: tuple = ()
    missing_data = None
    missing_data_why = ""

    def faults(self, cfn, name, alarm, metric):
        p = props(alarm)
        if number(cfn, p.get("Threshold")) != 0 or p.get("ComparisonOperator") != "GreaterThanThreshold":
            return f"{name} must page on any {metric} (> 0)"
        if self.missing_data and p.get("TreatMissingData") != self.missing_data:
            return f"{name}: TreatMissingData must be {self.missing_data} ({self.missing_data_why})"
        if not on_by_default(cfn, alarm):
            return f"{name} is not created with the default parameters"
        return None

    def match(self, cfn):
        out = []
        alarms = list(resources(cfn, "AWS::CloudWatch::Alarm"))
        for metric, consumer in self.required:
            found = [(n, self.faults(cfn, n, a, metric)) for n, a in alarms if watches(a, metric, Consumer=consumer)]
            if not found:
                out.append(self.problem(["Resources"], f"no alarm pages on {metric} > 0 (LoanServicing, Consumer={consumer})"))
            elif all(fault for _, fault in found):
                out.extend(self.problem(["Resources", n, "Properties"], fault) for n, fault in found)
        return out


class QuarantinesPage(_PagesOnReported):
    id = "E9118"
    shortdesc = "Every consumer's quarantine pages"
    description = (
        "A quarantined delivery has no effect until a person redrives it: the relay's "
        "(RelayQuarantined), collections' and account-state's (Quarantined) each page above 0."
    )
    required = (("RelayQuarantined", "outbox-relay"), ("Quarantined", "collections"), ("Quarantined", "account-state"))


class ReconcilerFindingsPage(_PagesOnReported):
    id = "E9119"
    shortdesc = "The reconciler's money and stuck-work findings page"
    description = (
        "API payments answered 202 but not applied (AcceptedNotApplied), parked facts ready but "
        "not released (ReadyNotReleased) and collections actions stuck PENDING "
        "(ActionsPendingTooLong) each page above 0; a day without the metric is not theirs to "
        "report (ReconciliationAlarm treats a missing run as breaching)."
    )
    required = (("AcceptedNotApplied", "reconciler"), ("ReadyNotReleased", "reconciler"), ("ActionsPendingTooLong", "reconciler"))
    missing_data = "notBreaching"
    missing_data_why = "the daily metric is absent between runs; a run that did not happen is ReconciliationAlarm's"


class ConsumerLogsAreArchived(ServicingRule):
    id = "E9120"
    shortdesc = "Every consumer's decision records are subscribed to a Firehose stream"
    description = (
        "Each function deciding on deliveries (SQS, stream, API, EventBridge) logs to a log group "
        "of its own with a subscription filter selecting the decision records "
        "({ $.kind = \"decision\" }) to a Firehose delivery stream of the stack."
    )

    def match(self, cfn):
        out = []
        all_res = cfn.template.get("Resources") or {}
        subs = [(n, s) for n, s in resources(cfn, "AWS::Logs::SubscriptionFilter") if on_by_default(cfn, s)]
        for name, fn in functions(cfn):
            if not list(events_of(fn, *DELIVERY_EVENTS)):
                continue
            lg = own_log_group(cfn, fn)
            if lg is None:
                out.append(self.problem(["Resources", name, "Properties"],
                                        f"{name} has no log group of its own (LoggingConfig.LogGroup): its decision records cannot be archived"))
                continue
            archived = any(
                logical_id(props(s).get("LogGroupName")) == lg
                and re.search(r'\$\.kind\s*=\s*"decision"', str(props(s).get("FilterPattern", "")))
                and (all_res.get(logical_id(props(s).get("DestinationArn"))) or {}).get("Type") == "AWS::KinesisFirehose::DeliveryStream"
                for _, s in subs
            )
            if not archived:
                out.append(self.problem(["Resources", lg], (
                    f"no subscription filter sends {name}'s decision records ({lg}, pattern "
                    "{ $.kind = \"decision\" }) to a Firehose delivery stream"
                )))
        return out


class EvidenceLandsInObjectLock(ServicingRule):
    id = "E9121"
    shortdesc = "The decision records' stream writes raw JSON lines to a retained Object-Lock bucket"
    description = (
        "The stream is a DirectPut one (CloudWatch Logs puts records), decompresses and extracts "
        "the log messages (else objects hold gzipped CloudWatch envelopes), partitions by consumer, "
        "keeps its errors apart, and writes to a bucket that cannot lose them: Object Lock with a "
        "default retention, versioning, retained on stack deletion, private, encrypted, TLS only."
    )

    def match(self, cfn):
        out = []
        all_res = cfn.template.get("Resources") or {}
        streams = archive_streams(cfn)
        if not streams:
            out.append(self.problem(["Resources"], "no Firehose delivery stream receives the decision records (E9120's subscription filters)"))
        for name, stream in streams.items():
            p = props(stream)
            path = ["Resources", name, "Properties"]
            if p.get("DeliveryStreamType", "DirectPut") != "DirectPut":
                out.append(self.problem(path, f"{name}: CloudWatch Logs puts records to a DirectPut stream, not {p['DeliveryStreamType']}"))
            s3 = p.get("ExtendedS3DestinationConfiguration")
            if not isinstance(s3, dict):
                out.append(self.problem(path, f"{name} has no ExtendedS3DestinationConfiguration"))
                continue
            processing = s3.get("ProcessingConfiguration") or {}
            processors = {
                pr.get("Type"): {x.get("ParameterName"): x.get("ParameterValue") for x in as_list(pr.get("Parameters") or [])}
                for pr in as_list(processing.get("Processors") or []) if isinstance(pr, dict)
            }
            if not truthy(processing.get("Enabled")) or (processors.get("Decompression") or {}).get("CompressionFormat") != "GZIP" \
                    or not truthy((processors.get("CloudWatchLogProcessing") or {}).get("DataMessageExtraction")):
                out.append(self.problem(path, (
                    f"{name} must decompress (Decompression GZIP) and extract the messages (CloudWatchLogProcessing "
                    "DataMessageExtraction true): the objects would hold gzipped CloudWatch Logs envelopes"
                )))
            if "partitionKeyFromQuery:consumer" not in str(s3.get("Prefix", "")) \
                    or ".consumer" not in str((processors.get("MetadataExtraction") or {}).get("MetadataExtractionQuery", "")) \
                    or not truthy((s3.get("DynamicPartitioningConfiguration") or {}).get("Enabled")):
                out.append(self.problem(path, f"{name} must partition by consumer (MetadataExtraction .consumer, dynamic partitioning, Prefix ...consumer=!{{partitionKeyFromQuery:consumer}}/)"))
            if not s3.get("ErrorOutputPrefix"):
                out.append(self.problem(path, f"{name} has no ErrorOutputPrefix: failed records would mix with the evidence"))
            bucket_name = logical_id(s3.get("BucketARN"))
            bucket = all_res.get(bucket_name)
            if not (isinstance(bucket, dict) and bucket.get("Type") == "AWS::S3::Bucket"):
                out.append(self.problem(path, f"{name} does not write to a bucket of this stack"))
                continue
            b = props(bucket)
            bpath = ["Resources", bucket_name]
            lock = b.get("ObjectLockConfiguration") or {}
            retention = ((lock.get("Rule") or {}).get("DefaultRetention")) or {}
            if not truthy(b.get("ObjectLockEnabled")) or lock.get("ObjectLockEnabled") != "Enabled" \
                    or not retention.get("Mode") or not (retention.get("Days") or retention.get("Years")):
                out.append(self.problem(bpath, f"{bucket_name} has no Object Lock with a default retention (Mode and Days or Years)"))
            if (b.get("VersioningConfiguration") or {}).get("Status") != "Enabled":
                out.append(self.problem(bpath, f"{bucket_name} is not versioned"))
            if bucket.get("DeletionPolicy") != "Retain" or bucket.get("UpdateReplacePolicy") != "Retain":
                out.append(self.problem(bpath, f"{bucket_name} must be retained (DeletionPolicy and UpdateReplacePolicy Retain)"))
            block = b.get("PublicAccessBlockConfiguration") or {}
            if not all(truthy(block.get(k)) for k in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")):
                out.append(self.problem(bpath, f"{bucket_name} does not block public access"))
            if not b.get("BucketEncryption"):
                out.append(self.problem(bpath, f"{bucket_name} has no default encryption"))
            tls_only = any(
                logical_id(props(bp).get("Bucket")) == bucket_name
                and any(st.get("Effect") == "Deny"
                        and str(((st.get("Condition") or {}).get("Bool") or {}).get("aws:SecureTransport")).lower() == "false"
                        for st in as_list((props(bp).get("PolicyDocument") or {}).get("Statement") or []) if isinstance(st, dict))
                for _, bp in resources(cfn, "AWS::S3::BucketPolicy")
            )
            if not tls_only:
                out.append(self.problem(bpath, f"no bucket policy denies {bucket_name} without TLS (aws:SecureTransport false)"))
        return out


class EvidenceHasAGlueTable(ServicingRule):
    id = "E9122"
    shortdesc = "A Glue table reads the evidence bucket, one column per decision-record field"
    description = (
        "JSON SerDe (org.openx.data.jsonserde.JsonSerDe), partition keys date and consumer with "
        "partition projection (no crawler) listing every consumer, in a Glue database of the "
        "stack, and a column for every property of docs/decision-record.schema.json (consumer is "
        "the partition key)."
    )

    def match(self, cfn):
        out = []
        all_res = cfn.template.get("Resources") or {}
        tables = archive_tables(cfn)
        if not tables:
            out.append(self.problem(["Resources"], "no Glue table reads the evidence bucket (StorageDescriptor.Location on the archive stream's bucket)"))
        fields = list((json.loads(SCHEMA.read_text()).get("properties") or {}))
        for name, table in tables:
            path = ["Resources", name, "Properties", "TableInput"]
            ti = props(table).get("TableInput") or {}
            sd = ti.get("StorageDescriptor") or {}
            if (sd.get("SerdeInfo") or {}).get("SerializationLibrary") != "org.openx.data.jsonserde.JsonSerDe":
                out.append(self.problem(path, f"{name} must read JSON lines with org.openx.data.jsonserde.JsonSerDe"))
            partitions = [str(k.get("Name", "")).lower() for k in as_list(ti.get("PartitionKeys") or []) if isinstance(k, dict)]
            if sorted(partitions) != ["consumer", "date"]:
                out.append(self.problem(path, f"{name}'s partition keys must be date and consumer (the stream's prefix), not {partitions}"))
            parameters = ti.get("Parameters") or {}
            if not truthy(parameters.get("projection.enabled")):
                out.append(self.problem(path, f"{name} has no partition projection (projection.enabled): new days would need a crawler"))
            elif parameters.get("projection.consumer.type") == "enum":
                # A consumer is named as its binary (the records' `consumer`): one not listed is never read.
                listed = set(str(parameters.get("projection.consumer.values", "")).split(","))
                unlisted = sorted({
                    ((fn.get("Metadata") or {}).get("BuildProperties") or {}).get("Binary")
                    for _, fn in functions(cfn) if list(events_of(fn, *DELIVERY_EVENTS))
                } - {None} - listed)
                if unlisted:
                    out.append(self.problem(path, f"{name}'s projection.consumer.values leaves out {', '.join(unlisted)}: their records are never read"))
            columns = {str(c.get("Name", "")).lower() for c in as_list(sd.get("Columns") or []) if isinstance(c, dict)}
            missing = [f for f in fields if f.lower() not in columns | set(partitions)]
            if missing:
                out.append(self.problem(path, f"{name} has no column for the decision-record fields {', '.join(missing)} ({SCHEMA.name})"))
            db = all_res.get(logical_id(props(table).get("DatabaseName")))
            if not (isinstance(db, dict) and db.get("Type") == "AWS::Glue::Database"):
                out.append(self.problem(path, f"{name} is not in a Glue database of this stack"))
        return out


# The runbook's questions (README, "evidence") and what a query answering each says, lower-case
# and without comments.
RUNBOOK_QUERIES = {
    "duplicates by source": [r"'duplicate'", r"group by\s+sourcesystem"],
    "accounts a source touched, with their money": [r"sourcesystem\s*=\s*\?", r"amountminor", r"group by\s+accountid"],
    "collisions with both fingerprints": [r"'collision'", r"fingerprint[\s\S]+fingerprint"],
    "suspected duplicates under different identities (same contentKey)": [r"contentkey", r"sourceeventid", r"having"],
    "all decision records of one account": [r"accountid\s*=\s*\?"],
}


class RunbookHasItsQueries(ServicingRule):
    id = "E9123"
    shortdesc = "The runbook's Athena named queries exist over the evidence table, each bounded by date"
    description = (
        "Duplicates by source, the accounts a source touched with their money, collisions with "
        "both fingerprints, one content key under different identities, all of one account's "
        "records: saved queries on the evidence table's database, each bounding the \"date\" "
        "partition (else a query reads the whole archive)."
    )

    def match(self, cfn):
        out = []
        databases = {logical_id(props(t).get("DatabaseName")) for _, t in archive_tables(cfn)} - {None}
        queries = []
        for name, q in resources(cfn, "AWS::Athena::NamedQuery"):
            p = props(q)
            if not on_by_default(cfn, q) or not any(names(p.get("Database"), db) for db in databases):
                continue
            sql = re.sub(r"--[^\n]*", "", str(text(p.get("QueryString")) or "")).lower()
            if not re.search(r'"date"\s*(between|>=|>|=|in)', sql):
                out.append(self.problem(["Resources", name, "Properties", "QueryString"], f"{name} does not bound \"date\": it reads the whole archive"))
                continue
            queries.append(sql)
        for what, patterns in RUNBOOK_QUERIES.items():
            if not any(all(re.search(pat, sql) for pat in patterns) for sql in queries):
                out.append(self.problem(["Resources"], f"no Athena named query on the evidence table's database answers \"{what}\""))
        return out


# ------------------------------------------------------------------ issue #24: failures that page nobody

APIGW = "AWS/ApiGateway"
# Event sources of consumers: deliveries a function can quarantine (an API answers instead).
CONSUMER_EVENTS = ("SQS", "DynamoDB", "Kinesis", "EventBridgeRule", "CloudWatchEvent")
RUNBOOK = ROOT / "docs" / "runbook.md"


def alarms_on(cfn, subject=None):
    """The alarms created with the default parameters; with `subject` (a resource), also those
    created under the very condition it is (an optional API's alarms exist with it)."""
    under = (subject or {}).get("Condition")
    return [(n, a) for n, a in resources(cfn, "AWS::CloudWatch::Alarm")
            if on_by_default(cfn, a) or (under is not None and a.get("Condition") == under)]


def metrics_of(alarm):
    """What an alarm reads: its own metric, or each MetricStat of its Metrics (metric math),
    as (namespace, metric name, dimensions, statistic)."""
    p = props(alarm)
    if p.get("MetricName"):
        yield p.get("Namespace"), p.get("MetricName"), dimensions(p.get("Dimensions")), p.get("ExtendedStatistic") or p.get("Statistic")
    for q in as_list(p.get("Metrics") or []):
        stat = (q or {}).get("MetricStat") if isinstance(q, dict) else None
        if isinstance(stat, dict):
            m = stat.get("Metric") or {}
            yield m.get("Namespace"), m.get("MetricName"), dimensions(m.get("Dimensions")), stat.get("Stat")


def binary_of(fn):
    return ((fn.get("Metadata") or {}).get("BuildProperties") or {}).get("Binary")


def http_apis(cfn):
    """The stack's HTTP APIs: SAM's and API Gateway v2's, and SAM's implicit one (ServerlessHttpApi)
    when a function's HttpApi event names no ApiId."""
    found = [n for n, _ in resources(cfn, "AWS::Serverless::HttpApi")]
    found += [n for n, a in resources(cfn, "AWS::ApiGatewayV2::Api") if props(a).get("ProtocolType") == "HTTP"]
    if any(not ev.get("ApiId") for _, fn in functions(cfn) for _, ev in events_of(fn, "HttpApi")):
        found.append("ServerlessHttpApi")
    return found


def on_api(dims, api):
    return set(dims) <= {"ApiId", "Stage"} and logical_id(dims.get("ApiId")) == api


def above(p):
    return p.get("ComparisonOperator") in ("GreaterThanThreshold", "GreaterThanOrEqualToThreshold")


class ApiServerErrorsPage(ServicingRule):
    id = "E9124"
    shortdesc = "Every HTTP API's 5xx answers page"
    description = (
        "An API that answers a failure itself (503 when DynamoDB throttles, 500 when the store "
        "refuses) never fails its invocation, so the function's Errors alarm stays quiet: an alarm "
        "on the API's own 5xx (AWS/ApiGateway, dimension ApiId: !Ref the API) must page above a "
        "threshold, created with the default parameters."
    )

    def match(self, cfn):
        out = []
        for api in http_apis(cfn):
            alarms = alarms_on(cfn, (cfn.template.get("Resources") or {}).get(api))
            reading = [(n, a) for n, a in alarms
                       if any(ns == APIGW and m == "5xx" and on_api(d, api) for ns, m, d, _ in metrics_of(a))]
            if not reading:
                out.append(self.problem(["Resources", api] if api in (cfn.template.get("Resources") or {}) else ["Resources"],
                                        f"no alarm pages on {api}'s 5xx answers (AWS/ApiGateway 5xx, ApiId = !Ref {api})"))
            elif not any(above(props(a)) for _, a in reading):
                out.extend(self.problem(["Resources", n, "Properties", "ComparisonOperator"],
                                        f"{n} does not page when {api}'s 5xx rise above its threshold") for n, _ in reading)
        return out


class ApiLatencyPages(ServicingRule):
    id = "E9125"
    shortdesc = "Every HTTP API's tail latency pages above a parameter"
    description = (
        "An average hides the slow tail callers time out on: an alarm on the API's Latency "
        "(AWS/ApiGateway, ApiId) with a high percentile (ExtendedStatistic p90-p100) above a "
        "threshold the deployer sets (a parameter)."
    )

    def match(self, cfn):
        out = []
        for api in http_apis(cfn):
            alarms = alarms_on(cfn, (cfn.template.get("Resources") or {}).get(api))
            reading = [(n, a) for n, a in alarms if any(ns == APIGW and m == "Latency" and on_api(d, api) for ns, m, d, _ in metrics_of(a))]
            faults = []
            for n, a in reading:
                p = props(a)
                stats = [s for ns, m, d, s in metrics_of(a) if ns == APIGW and m == "Latency"]
                if not any(re.fullmatch(r"p(9\d(\.\d+)?|100)", str(s)) for s in stats):
                    faults.append((n, f"{n} reads {stats}, not a high percentile (ExtendedStatistic p99)"))
                elif parameter(cfn, p.get("Threshold")) is None:
                    faults.append((n, f"{n}'s threshold is not a parameter: the latency callers tolerate is the deployer's to set"))
                elif not above(p):
                    faults.append((n, f"{n} does not page above its threshold"))
                else:
                    break
            else:
                if not reading:
                    out.append(self.problem(["Resources"], f"no alarm pages on {api}'s latency (AWS/ApiGateway Latency, ApiId = !Ref {api}, ExtendedStatistic p99, Threshold a parameter)"))
                out.extend(self.problem(["Resources", n, "Properties"], f) for n, f in faults)
        return out


def sqs_sources(cfn):
    """(function, queue logical id, queue) for every SQS event source of a function."""
    for name, fn in functions(cfn):
        for _, ev in events_of(fn, "SQS"):
            qname, q = queue(cfn, ev.get("Queue"))
            if q is not None:
                yield name, fn, qname, q


class QueuesAlarmOnTheirOldestMessage(ServicingRule):
    id = "E9126"
    shortdesc = "Every queue a function consumes alarms on its oldest message before it dead-letters"
    description = (
        "A consumer that stalls or retries everything leaves its queue's messages to age; the "
        "dead-letter alarm only fires after MaxReceiveCount x the visibility timeout. An alarm on "
        "ApproximateAgeOfOldestMessage (AWS/SQS, QueueName: !GetAtt Q.QueueName, Maximum) must "
        "page above a threshold that, with the default parameters, is below that horizon."
    )

    def match(self, cfn):
        out = []
        alarms = alarms_on(cfn)
        for fn_name, _, qname, q in sqs_sources(cfn):
            reading = [(n, a) for n, a in alarms
                       if any(ns == "AWS/SQS" and m == "ApproximateAgeOfOldestMessage" and logical_id(d.get("QueueName")) == qname
                              for ns, m, d, _ in metrics_of(a))]
            if not reading:
                out.append(self.problem(["Resources", qname], (
                    f"no alarm on {qname}'s ApproximateAgeOfOldestMessage ({fn_name} stalled or retrying "
                    "shows only when its dead-letter queue fills)"
                )))
                continue
            redrive = props(q).get("RedrivePolicy") if isinstance(props(q).get("RedrivePolicy"), dict) else {}
            receives = number(cfn, redrive.get("maxReceiveCount"), bound="Default") if redrive else None
            visibility = number(cfn, props(q).get("VisibilityTimeout", 30), bound="Default")
            horizon = receives * visibility if receives and visibility else None
            faults = []
            for n, a in reading:
                p = props(a)
                threshold = number(cfn, p.get("Threshold"), bound="Default")
                if p.get("Statistic") != "Maximum" or not above(p):
                    faults.append((n, f"{n} must page when the Maximum age rises above its threshold"))
                elif threshold is None or (horizon is not None and threshold >= horizon):
                    faults.append((n, (
                        f"{n} pages at {threshold} s, not before {qname} dead-letters a message "
                        f"({receives:g} deliveries x {visibility:g} s = {horizon:g} s with the defaults)" if horizon else
                        f"{n}'s threshold is not a number"
                    )))
                else:
                    break
            else:
                out.extend(self.problem(["Resources", n, "Properties"], f) for n, f in faults)
        return out


class SustainedRetriesPage(ServicingRule):
    id = "E9127"
    shortdesc = "Each SQS consumer's retries page when they last several periods"
    description = (
        "A batch item failure is retried by SQS, harmlessly once; retries in every period mean a "
        "consumer failing (throttling, a dependency down) long before its messages dead-letter. "
        "An alarm on the consumer's Retried (LoanServicing, Consumer = its binary, Sum > 0) over "
        "at least 2 evaluation periods, every one of them breaching."
    )

    def match(self, cfn):
        out = []
        alarms = alarms_on(cfn)
        seen = set()
        for fn_name, fn, _, _ in sqs_sources(cfn):
            consumer = binary_of(fn)
            if fn_name in seen:
                continue
            seen.add(fn_name)
            reading = [(n, a) for n, a in alarms if consumer and watches(a, "Retried", Consumer=consumer)]
            if not reading:
                out.append(self.problem(["Resources", fn_name], (
                    f"no alarm pages on {fn_name}'s sustained retries (LoanServicing Retried, Consumer={consumer or '<its binary>'})"
                )))
                continue
            ok = False
            for n, a in reading:
                p = props(a)
                periods = number(cfn, p.get("EvaluationPeriods"), bound="Default") or 0
                datapoints = number(cfn, p.get("DatapointsToAlarm", p.get("EvaluationPeriods")), bound="Default") or 0
                if periods >= 2 and datapoints == periods and number(cfn, p.get("Threshold")) == 0 \
                        and p.get("ComparisonOperator") == "GreaterThanThreshold" and p.get("Statistic") == "Sum":
                    ok = True
            if not ok:
                out.extend(self.problem(["Resources", n, "Properties"], (
                    f"{n} must page on Sum of Retried > 0 in each of at least 2 periods (EvaluationPeriods >= 2, "
                    "DatapointsToAlarm = EvaluationPeriods): one retry is harmless, retries that last are not"
                )) for n, _ in reading)
        return out


class EveryConsumerQuarantinePages(ServicingRule):
    id = "E9128"
    shortdesc = "Every consumer function of the template has a quarantine alarm"
    description = (
        "Derived from the functions (E9118 names three): each function consuming deliveries "
        "(SQS, streams, EventBridge; an API answers instead) has an alarm paging on its "
        "quarantines (LoanServicing *Quarantined, Consumer = its binary, > 0), so a new consumer "
        "cannot be added without one."
    )

    def match(self, cfn):
        out = []
        alarms = alarms_on(cfn)
        for name, fn in functions(cfn):
            if not list(events_of(fn, *CONSUMER_EVENTS)):
                continue
            consumer = binary_of(fn)
            paging = consumer is not None and any(
                props(a).get("Namespace") == LOAN and str(props(a).get("MetricName", "")).endswith("Quarantined")
                and dimensions(props(a).get("Dimensions")) == {"Consumer": consumer}
                and number(cfn, props(a).get("Threshold")) == 0 and props(a).get("ComparisonOperator") == "GreaterThanThreshold"
                for _, a in alarms
            )
            if not paging:
                out.append(self.problem(["Resources", name], (
                    f"no alarm pages on {name}'s quarantines (LoanServicing Quarantined or RelayQuarantined, "
                    f"Consumer={consumer or '<its Metadata.BuildProperties.Binary>'}, > 0)"
                )))
        return out


class SystemLogsKeepReports(ServicingRule):
    id = "E9129"
    shortdesc = "Every function's system logs are kept at INFO (its REPORT lines)"
    description = (
        "With LogFormat JSON, SystemLogLevel WARN or ERROR drops every platform.report line: "
        "no duration, memory or init time (cold start) per invocation, and no status of a timed-out "
        "one. SystemLogLevel must be INFO or DEBUG (or absent: INFO)."
    )

    def match(self, cfn):
        out = []
        fns = list(functions(cfn)) + list(resources(cfn, "AWS::Lambda::Function"))
        for name, fn in fns:
            cfg = props(fn).get("LoggingConfig") or {}
            level = cfg.get("SystemLogLevel")
            if level is not None and str(level).upper() not in ("INFO", "DEBUG"):
                out.append(self.problem(["Resources", name, "Properties", "LoggingConfig", "SystemLogLevel"], (
                    f"{name}'s SystemLogLevel {level} drops Lambda's REPORT lines (duration, memory, init): use INFO"
                )))
        return out


RELEASED_INDEXES = ROOT / "infra" / "policy" / "released-indexes.json"


class OneIndexChangePerRelease(ServicingRule):
    id = "E9136"
    shortdesc = "A release creates or deletes at most one GSI per table"
    description = (
        "DynamoDB creates or deletes one global secondary index per table update, and "
        "CloudFormation fails the stack update that asks for more (MiniStack and DynamoDB Local "
        "do not). Against infra/policy/released-indexes.json (the last release's indexes), a "
        "table may gain or lose one index; a changed key schema or projection is a deletion and "
        "a creation."
    )

    def match(self, cfn):
        out = []
        released = json.loads(RELEASED_INDEXES.read_text())
        for name, table in resources(cfn, "AWS::DynamoDB::Table"):
            if name not in released:
                continue
            shape = lambda g: json.dumps({k: g.get(k) for k in ("IndexName", "KeySchema", "Projection")}, sort_keys=True)
            now = {shape(g) for g in (props(table).get("GlobalSecondaryIndexes") or [])}
            before = {shape(g) for g in released[name]}
            changes = len(now - before) + len(before - now)
            if changes > 1:
                names = sorted(json.loads(s)["IndexName"] for s in (now ^ before))
                out.append(self.problem(["Resources", name, "Properties", "GlobalSecondaryIndexes"], (
                    f"{name}: {changes} index creations/deletions in one release ({', '.join(names)}); "
                    "CloudFormation allows one per update: release them one at a time"
                )))
        return out


def runbook_anchors():
    """The anchors docs/runbook.md defines (GitHub's heading slugs and explicit <a id/name>), or
    None while it does not exist."""
    if not RUNBOOK.exists():
        return None
    text = RUNBOOK.read_text()
    anchors = set(re.findall(r"""<a\s+(?:id|name)\s*=\s*["']([^"']+)["']""", text))
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


class AlarmsLinkTheirRunbook(ServicingRule):
    id = "E9130"
    shortdesc = "Every alarm's description ends with its runbook link"
    description = (
        "The page must say where to start: each alarm's AlarmDescription ends with "
        "`(runbook: ${RunbookUrl}#<its logical id, lower case>)` (a !Sub: the deployer's link to "
        "docs/runbook.md as published, a repository path by default); once docs/runbook.md has an "
        "entry for any alarm (a heading that is the alarm's id, or an explicit <a id>), it must "
        "have one for every alarm."
    )

    def match(self, cfn):
        out = []
        alarms = list(resources(cfn, "AWS::CloudWatch::Alarm")) + list(resources(cfn, "AWS::CloudWatch::CompositeAlarm"))
        anchors = runbook_anchors()
        # Checked once the runbook has per-alarm entries at all (it is written after the alarms).
        if anchors is not None and not anchors & {name.lower() for name, _ in alarms}:
            anchors = None
        for name, alarm in alarms:
            anchor = name.lower()
            path = ["Resources", name, "Properties", "AlarmDescription"]
            raw = props(alarm).get("AlarmDescription")
            desc = sub_text(raw) if isinstance(raw, dict) else None
            link = f"(runbook: ${{RunbookUrl}}#{anchor})"
            if desc is None or not desc.rstrip().endswith(link) or "RunbookUrl" not in (cfn.template.get("Parameters") or {}):
                out.append(self.problem(path, f"{name}'s AlarmDescription is not a !Sub ending with {link} (and a RunbookUrl parameter)"))
            elif anchors is not None and anchor not in anchors:
                out.append(self.problem(path, f"docs/runbook.md has no #{anchor} (a heading `{name}` or <a id=\"{anchor}\">)"))
        return out


def deadline_constant(name):
    """A `Duration` constant of account-state's deadline (functions/account-state/src/deadline.rs),
    in seconds: the rule and the code read one definition."""
    source = (ROOT / "functions/account-state/src/deadline.rs").read_text()
    found = re.search(rf"const {name}: Duration = Duration::from_(secs|millis)\((\d+)\)", source)
    if found is None:
        raise ValueError(f"deadline.rs no longer defines {name} as a Duration literal")
    unit, value = found.groups()
    return int(value) / (1000 if unit == "millis" else 1)


class TimeoutFitsTheDeadline(ServicingRule):
    id = "E9131"
    shortdesc = "An SQS consumer's timeout is one AWS allows and fits a request beside its answer reserve"
    description = (
        "Issue #30: with a fixed 12 s reserve a function of AWS's default 3 s timeout started no "
        "request and retried every message into its dead-letter queue. account-state derives its "
        "reserve from the invocation (deadline.rs: a tenth, within ANSWER_FLOOR and 2 s) and must "
        "still start one request of SHORTEST_REQUEST; the emulators run any timeout, AWS only "
        "1-900 s. Read with E9105 (the queue hides a message for 6 x the timeout + the window)."
    )

    def match(self, cfn):
        out = []
        floor = deadline_constant("ANSWER_FLOOR")
        ceiling = deadline_constant("ANSWER_CEILING")
        shortest = deadline_constant("SHORTEST_REQUEST")
        for name, fn in functions(cfn):
            if not any(True for _ in events_of(fn, "SQS")):
                continue
            path = ["Resources", name, "Properties", "Timeout"]
            timeout = number(cfn, props(fn).get("Timeout", 3))
            if timeout is None or not 1 <= timeout <= 900 or timeout != int(timeout):
                out.append(self.problem(path, f"{name}'s Timeout must be a whole number of seconds in 1..900 (AWS refuses others)"))
                continue
            reserve = min(max(timeout / 10, floor), ceiling)
            if timeout - reserve < shortest:
                out.append(self.problem(path, (
                    f"{name}'s {timeout:g} s leaves {timeout - reserve:.3f} s after its {reserve:.3f} s "
                    f"answer reserve, less than one {shortest:g} s request"
                )))
        return out

TABLE_ACCESS = ROOT / "infra" / "policy" / "table-access.json"
STREAM_ACTIONS = {"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"}


def table_target(cfn, resource):
    """What a statement's resource names of a DynamoDB table: ("table", None), ("index", name),
    or None (a stream, or not a table)."""
    tables = {n for n, _ in resources(cfn, "AWS::DynamoDB::Table")}
    if isinstance(resource, dict) and "Fn::GetAtt" in resource:
        att = resource["Fn::GetAtt"]
        parts = att.split(".") if isinstance(att, str) else list(att)
        if parts and parts[0] in tables and parts[1:] == ["Arn"]:
            return ("table", None)
    if isinstance(resource, dict) and "Fn::Sub" in resource:
        sub = resource["Fn::Sub"]
        text = sub if isinstance(sub, str) else (sub[0] if isinstance(sub, list) and sub else "")
        found = re.fullmatch(r"\$\{(\w+)\.Arn\}/index/([\w.-]+)", text or "")
        if found and found.group(1) in tables:
            return ("index", found.group(2))
    return None


def table_grants(cfn, fn):
    """A function's table grants as (action, key pattern) pairs, in the declaration's terms."""
    pairs = set()
    for st in statements(cfn, fn):
        if st.get("Effect") != "Allow":
            continue
        targets = [t for t in (table_target(cfn, r) for r in as_list(st.get("Resource"))) if t]
        if not targets:
            continue
        leading = (st.get("Condition") or {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
        for action in actions(st):
            if not action.startswith("dynamodb:") or action in STREAM_ACTIONS:
                continue
            for kind, index in targets:
                if kind == "index":
                    # An index's leading keys are its own partition key's values.
                    for key in as_list(leading) if leading else ["*"]:
                        pairs.add((action, f"index/{index}:{key}"))
                elif action == "dynamodb:Scan":
                    pairs.add((action, "*"))
                else:
                    for key in as_list(leading) if leading else ["* (no dynamodb:LeadingKeys)"]:
                        pairs.add((action, key))
    return pairs


class TableGrantsAreTheDeclaredAccess(ServicingRule):
    id = "E9132"
    shortdesc = "Each role's table grants are exactly its declared (action, key prefix) pairs"
    description = (
        "Issue #31: the payments API could PutItem any loan because one statement granted every "
        "action on every prefix it touched. infra/policy/table-access.json declares, per function, "
        "each action with the key prefixes it may touch; tests/it/privileges.rs proves the code "
        "makes no other request and uses every declared pair; this rule holds the template to it: "
        "a grant beyond it is an over-grant, one short of it breaks the function."
    )

    def match(self, cfn):
        out = []
        declared_all = json.loads(TABLE_ACCESS.read_text())
        for name, fn in functions(cfn):
            path = ["Resources", name, "Properties"]
            granted = table_grants(cfn, fn)
            if name not in declared_all:
                if granted:
                    out.append(self.problem(path, f"{name} is granted table actions but has no declaration in infra/policy/table-access.json"))
                continue
            declared = {(a, k) for a, keys in declared_all[name].items() for k in keys}
            for action, key in sorted(granted - declared):
                out.append(self.problem(path, f"{name}: {action} on {key} is granted beyond its declared access (an over-grant)"))
            for action, key in sorted(declared - granted):
                out.append(self.problem(path, f"{name}: declared {action} on {key} is not granted (the function would be denied)"))
        return out


READ_ACTIONS = {"dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:Scan"}


class ConfinedReadsNameTheirAttributes(ServicingRule):
    id = "E9143"
    shortdesc = "A read confined to some attributes is granted with exactly those"
    description = (
        "Issue #31: the payments API may read account-state's payment records to list their "
        "allocations, and its role granted BatchGetItem on every attribute of them (the fact's "
        "whole body, its evidence) though the code projects two. infra/policy/table-access.json "
        "`projections` names, per function and (action, key prefix), the attributes it may read "
        "there; every statement granting the pair carries exactly them in ForAllValues:"
        "StringEquals dynamodb:Attributes with StringEqualsIfExists dynamodb:Select "
        "SPECIFIC_ATTRIBUTES, and a statement that confines a pair the declaration does not "
        "would deny the function. tests/it/privileges.rs holds the requests to the same lists."
    )

    def match(self, cfn):
        out = []
        declared_all = json.loads(TABLE_ACCESS.read_text()).get("projections") or {}
        for name, fn in functions(cfn):
            declared = {tuple(grant.split(" ", 1)): set(attrs)
                        for grant, attrs in (declared_all.get(name) or {}).items()}
            path = ["Resources", name, "Properties"]
            granted = set()
            for st in statements(cfn, fn):
                if st.get("Effect") != "Allow":
                    continue
                if not any(t == ("table", None) for t in (table_target(cfn, r) for r in as_list(st.get("Resource")))):
                    continue
                conditions = st.get("Condition") or {}
                attrs = (conditions.get("ForAllValues:StringEquals") or {}).get("dynamodb:Attributes")
                select = (conditions.get("StringEqualsIfExists") or {}).get("dynamodb:Select")
                leading = (conditions.get("ForAllValues:StringLike") or {}).get("dynamodb:LeadingKeys")
                sid = st.get("Sid", "?")
                # Reads only: a write's dynamodb:Attributes (the attributes it sets) is another check.
                for action in (a for a in actions(st) if a in READ_ACTIONS):
                    for key in as_list(leading) if leading else ["*"]:
                        pair = (action, key)
                        if pair in declared:
                            granted.add(pair)
                            if attrs is None or set(as_list(attrs)) != declared[pair] or select != "SPECIFIC_ATTRIBUTES":
                                out.append(self.problem(path, (
                                    f"{name}/{sid}: {action} on {key} must carry ForAllValues:StringEquals "
                                    f"dynamodb:Attributes {sorted(declared[pair])} and StringEqualsIfExists "
                                    f"dynamodb:Select SPECIFIC_ATTRIBUTES, not {attrs!r} / {select!r}")))
                        elif attrs is not None:
                            out.append(self.problem(path, (
                                f"{name}/{sid}: confines {action} on {key} to {sorted(as_list(attrs))}, "
                                "which table-access.json `projections` does not declare (the function would be denied)")))
            for action, key in sorted(set(declared) - granted):
                out.append(self.problem(path, f"{name}: a projection is declared for {action} on {key}, which no statement grants"))
        return out


def relay_sources():
    """The sources the relay may publish (functions/outbox-relay/src/admission.rs SOURCES)."""
    source = (ROOT / "functions/outbox-relay/src/admission.rs").read_text()
    found = re.search(r"pub const SOURCES: \[&str; \d+\] = \[([^\]]*)\];", source)
    if found is None:
        raise ValueError("admission.rs no longer defines SOURCES as a literal list")
    return set(re.findall(r'"([^"]+)"', found.group(1)))


def denies_put_events_to_all(policy, condition_holds):
    """Whether a bus `policy` denies events:PutEvents to every principal under a Condition
    that `condition_holds` accepts."""
    return any(
        st.get("Effect") == "Deny"
        and st.get("Principal") in ("*", {"AWS": "*"})
        and "events:PutEvents" in actions(st)
        and condition_holds(st.get("Condition") or {})
        for st in as_list((policy or {}).get("Statement") or [])
        if isinstance(st, dict)
    )


class OnlyTheRelayPublishesItsSources(ServicingRule):
    id = "E9133"
    shortdesc = "The servicing bus admits only the relay, and the relay only its sources"
    description = (
        "Issue #31: the bus had no resource policy, so any principal of the account with "
        "events:PutEvents could put a DelinquencyChanged (a customer notice) on it, and the relay "
        "could publish any source. The bus that a function publishes to (its environment names "
        "it) denies PutEvents to every principal but that function's role; that role's "
        "PutEvents carries an events:source condition listing exactly the relay's SOURCES; no "
        "other function may PutEvents; and the bus denies every principal (the operators' role "
        "too) any other source."
    )

    def match(self, cfn):
        out = []
        buses = {name: bus for name, bus in resources(cfn, "AWS::Events::EventBus")}
        allowed = relay_sources()
        for name, fn in functions(cfn):
            env = (props(fn).get("Environment") or {}).get("Variables") or {}
            published = [logical_id(v) for v in env.values() if logical_id(v) in buses]
            puts = [st for st in statements(cfn, fn) if st.get("Effect") == "Allow" and "events:PutEvents" in actions(st)]
            path = ["Resources", name, "Properties"]
            if not published:
                if puts:
                    out.append(self.problem(path, f"{name} may events:PutEvents but publishes to no servicing bus: only the relay publishes"))
                continue
            role_name = logical_id(props(fn).get("Role"))
            for st in puts:
                sources = (st.get("Condition") or {}).get("ForAllValues:StringEquals", {}).get("events:source")
                if sources is None or set(as_list(sources)) != allowed:
                    out.append(self.problem(path, (
                        f"{name}/{st.get('Sid', '?')}: events:PutEvents must carry ForAllValues:StringEquals "
                        f"events:source {sorted(allowed)} (admission.rs SOURCES), not {sources!r}"
                    )))
            for bus_name in published:
                policy = props(buses[bus_name]).get("Policy") or {}
                guarded = denies_put_events_to_all(policy, lambda condition: any(
                    logical_id(arn) == role_name
                    for test in ("ArnNotEquals", "ArnNotLike")
                    for arn in as_list((condition.get(test) or {}).get("aws:PrincipalArn"))
                ))
                if not guarded:
                    out.append(self.problem(["Resources", bus_name, "Properties"], (
                        f"{bus_name}: its Policy must deny events:PutEvents to every principal but "
                        f"{role_name} (ArnNotEquals aws:PrincipalArn), the relay that publishes to it"
                    )))
                # The principals it admits (the operators' role too) publish the relay's sources only.
                sourced = denies_put_events_to_all(policy, lambda condition: (
                    set(condition) == {"ForAnyValue:StringNotEquals"}
                    and set(condition["ForAnyValue:StringNotEquals"]) == {"events:source"}
                    and set(as_list(condition["ForAnyValue:StringNotEquals"]["events:source"])) == allowed
                ))
                if not sourced:
                    out.append(self.problem(["Resources", bus_name, "Properties"], (
                        f"{bus_name}: its Policy must deny events:PutEvents to every principal "
                        f"(ForAnyValue:StringNotEquals events:source {sorted(allowed)}, no other "
                        f"condition): a principal it admits publishes no other source"
                    )))
        return out


def sub_text(value):
    """The template string of a `!Sub` (or a plain string), else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Sub" in value:
        sub = value["Fn::Sub"]
        return sub if isinstance(sub, str) else (sub[0] if isinstance(sub, list) and sub else None)
    return None


class KeysThroughServicesAndEvidenceFromItsLogGroups(ServicingRule):
    id = "E9134"
    shortdesc = "Roles use KMS keys only through services; the evidence subscription role trusts only its log groups"
    description = (
        "Issue #31: function roles could decrypt with the stack's key directly (no kms:ViaService), "
        "and the role CloudWatch Logs assumes to write the 7-year evidence archive trusted every "
        "log group of the account, so anyone able to create a subscription filter with it could "
        "put records there. Every role's KMS grant carries kms:ViaService; a subscription "
        "filter's role trusts, by aws:SourceArn, only the log groups such filters subscribe."
    )

    def match(self, cfn):
        out = []
        for name, role in resources(cfn, "AWS::IAM::Role"):
            for st in role_statements(role):
                if st.get("Effect") != "Allow" or not any(a.startswith("kms:") for a in actions(st)):
                    continue
                conditions = st.get("Condition") or {}
                blocks = [block for block in conditions.values() if isinstance(block, dict)]
                if not any("kms:ViaService" in block for block in blocks):
                    out.append(self.problem(["Resources", name, "Properties", "Policies"],
                                            f"{name}/{st.get('Sid', '?')}: KMS actions without a kms:ViaService condition"))
                # Through Secrets Manager a role only ever decrypts a secret it reads: a grant
                # shared with other services, or not bound to the secret, opens every secret
                # under the key.
                through_secrets = any("secretsmanager." in str(block.get("kms:ViaService")) for block in blocks)
                bound = any("kms:EncryptionContext:SecretARN" in block for block in blocks)
                if through_secrets and (set(actions(st)) != {"kms:Decrypt"} or not bound):
                    out.append(self.problem(["Resources", name, "Properties", "Policies"],
                                            f"{name}/{st.get('Sid', '?')}: a key used through Secrets Manager must be kms:Decrypt only, "
                                            "for its own statement, bound to the secret by kms:EncryptionContext:SecretARN"))
        subscribed = {}
        for _, flt in resources(cfn, "AWS::Logs::SubscriptionFilter"):
            role = logical_id(props(flt).get("RoleArn"))
            group = logical_id(props(flt).get("LogGroupName"))
            if role:
                subscribed.setdefault(role, set()).add(group)
        roles = dict(resources(cfn, "AWS::IAM::Role"))
        for role_name, groups in subscribed.items():
            role = roles.get(role_name)
            if role is None:
                continue
            path = ["Resources", role_name, "Properties", "AssumeRolePolicyDocument"]
            for st in as_list((props(role).get("AssumeRolePolicyDocument") or {}).get("Statement") or []):
                if not isinstance(st, dict) or st.get("Effect") != "Allow":
                    continue
                arns = []
                for test in ("StringLike", "StringEquals", "ArnLike", "ArnEquals"):
                    arns += as_list(((st.get("Condition") or {}).get(test) or {}).get("aws:SourceArn") or [])
                if not arns:
                    out.append(self.problem(path, f"{role_name}: trusted without an aws:SourceArn condition"))
                for arn in arns:
                    text = sub_text(arn) or ""
                    found = re.search(r"log-group:\$\{(\w+)\}(:\*)?$", text)
                    if found is None or found.group(1) not in groups:
                        out.append(self.problem(path, (
                            f"{role_name}: aws:SourceArn {text!r} is not one of the log groups its "
                            f"subscription filters subscribe ({', '.join(sorted(g for g in groups if g))})"
                        )))
        return out


def denies_plain_transport(statement):
    conditions = statement.get("Condition") or {}
    return (
        statement.get("Effect") == "Deny"
        and statement.get("Principal") in ("*", {"AWS": "*"})
        and str((conditions.get("Bool") or {}).get("aws:SecureTransport")).lower() == "false"
    )


class TransportAndDeletionGuarded(ServicingRule):
    id = "E9135"
    shortdesc = "Queues and topics refuse plain transport; the table has deletion protection"
    description = (
        "Issue #31: no SQS or SNS policy denied requests without TLS (aws:SecureTransport), and "
        "the servicing table - every loan, claim and allocation - could be deleted by one API "
        "call (DeletionPolicy Retain guards only against the stack's own deletion). Every queue "
        "and topic is named by a policy statement denying aws:SecureTransport false to every "
        "principal; every DynamoDB table has DeletionProtectionEnabled."
    )

    def match(self, cfn):
        out = []
        guarded = set()
        for kind, list_key in (("AWS::SQS::QueuePolicy", "Queues"), ("AWS::SNS::TopicPolicy", "Topics")):
            for _, policy in resources(cfn, kind):
                statements_ = as_list((props(policy).get("PolicyDocument") or {}).get("Statement") or [])
                if any(isinstance(st, dict) and denies_plain_transport(st) for st in statements_):
                    guarded |= {logical_id(q) for q in as_list(props(policy).get(list_key) or [])}
        for kind in ("AWS::SQS::Queue", "AWS::SNS::Topic"):
            for name, _ in resources(cfn, kind):
                if name not in guarded:
                    out.append(self.problem(["Resources", name], f"{name}: no policy denies requests without TLS (aws:SecureTransport false)"))
        for name, table in resources(cfn, "AWS::DynamoDB::Table"):
            if str(props(table).get("DeletionProtectionEnabled")).lower() != "true":
                out.append(self.problem(["Resources", name, "Properties"], f"{name}: DeletionProtectionEnabled is not true"))
        return out


def references(node, name):
    """Whether `node` (any part of a template) refers to the resource `name` (Ref / GetAtt / Sub)."""
    if isinstance(node, dict):
        if logical_id(node) == name:
            return True
        if "Fn::Sub" in node:
            text = sub_text(node) or ""
            if re.search(r"\$\{" + re.escape(name) + r"(\.[^}]*)?\}", text):
                return True
        return any(references(v, name) for v in node.values())
    if isinstance(node, list):
        return any(references(v, name) for v in node)
    return False


# What the evidence key may serve: the locked bucket, the stream writing to it, roles, its alias.
EVIDENCE_KEY_USERS = {"AWS::S3::Bucket", "AWS::KinesisFirehose::DeliveryStream", "AWS::IAM::Role", "AWS::KMS::Alias", "AWS::Athena::WorkGroup"}
# What only the break-glass role may do to it.
EVIDENCE_KEY_GUARDED = {"kms:DisableKey", "kms:ScheduleKeyDeletion", "kms:DisableKeyRotation", "kms:PutKeyPolicy"}


class EvidenceHasItsOwnGuardedKey(ServicingRule):
    id = "E9137"
    shortdesc = "The evidence archive has its own KMS key, disabled or deleted only by break-glass"
    description = (
        "Issue #31: one KMS key encrypted everything and its policy delegated kms:* to the "
        "account: an administrator could disable it and make the 7-year, COMPLIANCE-locked "
        "evidence unreadable. A bucket with Object Lock (the evidence) and every delivery stream "
        "writing to it encrypt with a key that nothing else uses, retained with the archive, "
        "whose policy denies disabling, deleting, stopping rotation and rewriting the policy to "
        "every principal but one (an aws:PrincipalArn condition)."
    )

    def match(self, cfn):
        out = []
        keys = dict(resources(cfn, "AWS::KMS::Key"))
        for bucket_name, bucket in resources(cfn, "AWS::S3::Bucket"):
            if not props(bucket).get("ObjectLockEnabled"):
                continue
            path = ["Resources", bucket_name, "Properties", "BucketEncryption"]
            rules = as_list((props(bucket).get("BucketEncryption") or {}).get("ServerSideEncryptionConfiguration") or [])
            key_name = next((logical_id((r.get("ServerSideEncryptionByDefault") or {}).get("KMSMasterKeyID"))
                             for r in rules if isinstance(r, dict)), None)
            if key_name not in keys:
                out.append(self.problem(path, f"{bucket_name}: evidence must be encrypted with a KMS key of this template"))
                continue
            key = keys[key_name]
            key_path = ["Resources", key_name]
            for stream_name, stream in resources(cfn, "AWS::KinesisFirehose::DeliveryStream"):
                destination = props(stream).get("ExtendedS3DestinationConfiguration") or props(stream).get("S3DestinationConfiguration") or {}
                if logical_id(destination.get("BucketARN")) != bucket_name:
                    continue
                used = [
                    logical_id((props(stream).get("DeliveryStreamEncryptionConfigurationInput") or {}).get("KeyARN")),
                    logical_id(((destination.get("EncryptionConfiguration") or {}).get("KMSEncryptionConfig") or {}).get("AWSKMSKeyARN")),
                ]
                if any(u != key_name for u in used):
                    out.append(self.problem(["Resources", stream_name, "Properties"],
                                            f"{stream_name} writes {bucket_name}: it must encrypt with {key_name}, not {used}"))
            for other_name, other in resources(cfn):
                if other.get("Type") in EVIDENCE_KEY_USERS or other_name == key_name:
                    continue
                if references(other, key_name):
                    out.append(self.problem(key_path, f"{key_name} encrypts the evidence, yet {other_name} ({other.get('Type')}) uses it too: the evidence key serves the evidence only"))
            if key.get("DeletionPolicy") != "Retain":
                out.append(self.problem(key_path, f"{key_name}: the evidence key must be retained (DeletionPolicy: Retain), like the archive"))
            statements = as_list((props(key).get("KeyPolicy") or {}).get("Statement") or [])
            guarded = set()
            for st in statements:
                if not isinstance(st, dict) or st.get("Effect") != "Deny" or st.get("Principal") not in ("*", {"AWS": "*"}):
                    continue
                conditions = st.get("Condition") or {}
                if any("aws:PrincipalArn" in (conditions.get(test) or {}) for test in ("ArnNotEquals", "ArnNotLike")):
                    guarded |= set(actions(st))
            missing = EVIDENCE_KEY_GUARDED - guarded
            if missing:
                out.append(self.problem(key_path, (
                    f"{key_name}: its policy must deny {', '.join(sorted(missing))} to every principal "
                    "but the break-glass role (Deny, Principal *, ArnNotEquals aws:PrincipalArn)"
                )))
        return out


class EvidenceQueriesRunEncrypted(ServicingRule):
    id = "E9138"
    shortdesc = "Evidence queries run in an enforced workgroup that encrypts results and forgets them"
    description = (
        "Issue #31: the runbook's Athena queries ran in the account's primary workgroup, whose "
        "results location and encryption each user chooses: the evidence's account ids and "
        "amounts could land unencrypted anywhere, and stay. Every named query names a workgroup "
        "of this template with EnforceWorkGroupConfiguration, results encrypted with a KMS key "
        "(SSE_KMS or CSE_KMS, a key given) into a bucket of this template that expires them and "
        "has no Object Lock (which would keep every result for years)."
    )

    def match(self, cfn):
        out = []
        groups = dict(resources(cfn, "AWS::Athena::WorkGroup"))
        buckets = dict(resources(cfn, "AWS::S3::Bucket"))
        for name, query in resources(cfn, "AWS::Athena::NamedQuery"):
            path = ["Resources", name, "Properties"]
            group_name = logical_id(props(query).get("WorkGroup"))
            if group_name not in groups:
                out.append(self.problem(path, f"{name}: an evidence query must name a WorkGroup of this template (!Ref), not the account's primary one"))
        for group_name, group in groups.items():
            path = ["Resources", group_name, "Properties", "WorkGroupConfiguration"]
            config = props(group).get("WorkGroupConfiguration") or {}
            if config.get("EnforceWorkGroupConfiguration") is not True:
                out.append(self.problem(path, f"{group_name}: EnforceWorkGroupConfiguration must be true (else a user overrides where results go and how)"))
            results = config.get("ResultConfiguration") or {}
            encryption = results.get("EncryptionConfiguration") or {}
            if encryption.get("EncryptionOption") not in ("SSE_KMS", "CSE_KMS") or not encryption.get("KmsKey"):
                out.append(self.problem(path, f"{group_name}: results must be encrypted with a KMS key (SSE_KMS or CSE_KMS and KmsKey)"))
            location = sub_text(results.get("OutputLocation"))
            bucket_name = next((b for b in buckets if location and f"${{{b}}}" in location), None)
            if bucket_name is None:
                out.append(self.problem(path, f"{group_name}: results must go to a bucket of this template (OutputLocation s3://${{Bucket}}/)"))
                continue
            bucket = props(buckets[bucket_name])
            rules = as_list((bucket.get("LifecycleConfiguration") or {}).get("Rules") or [])
            if bucket.get("ObjectLockEnabled") or not any(
                    isinstance(r, dict) and r.get("ExpirationInDays") and r.get("Status") == "Enabled" for r in rules):
                out.append(self.problem(["Resources", bucket_name, "Properties"],
                                        f"{bucket_name} holds query results: they must expire (a lifecycle ExpirationInDays) and never be locked"))
        return out


class EveryApiRouteIsAuthorizedAndServedAlike(ServicingRule):
    id = "E9139"
    shortdesc = "Each endpoint of a function serves its routes alike, each route authorized"
    description = (
        "Issue #32: the payments API took IAM callers only; an optional JWT endpoint is written "
        "as API Gateway resources beside SAM's HttpApi. A route added to one endpoint and not the "
        "other, or a route without an authorizer, is a hole nobody sees locally (MiniStack does "
        "not enforce authorizers). Every AWS::ApiGatewayV2::Route has an AuthorizationType other "
        "than NONE (JWT with an AuthorizerId), and the routes of an API whose integration invokes "
        "a function are exactly that function's HttpApi events (method and path)."
    )

    def match(self, cfn):
        out = []
        by_api = {}
        integrations = dict(resources(cfn, "AWS::ApiGatewayV2::Integration"))
        for name, route in resources(cfn, "AWS::ApiGatewayV2::Route"):
            p = props(route)
            path = ["Resources", name, "Properties"]
            kind = p.get("AuthorizationType", "NONE")
            if kind == "NONE":
                out.append(self.problem(path, f"{name}: a route without authorization (AuthorizationType NONE)"))
            elif kind == "JWT" and not p.get("AuthorizerId"):
                out.append(self.problem(path, f"{name}: AuthorizationType JWT names no AuthorizerId"))
            target = sub_text(p.get("Target")) or ""
            integration = next((i for i in integrations if f"${{{i}}}" in target), None)
            if integration is None:
                continue
            function = logical_id(props(integrations[integration]).get("IntegrationUri"))
            by_api.setdefault((logical_id(p.get("ApiId")), function), set()).add(p.get("RouteKey"))
        fns = dict(functions(cfn))
        for (api, function), keys in by_api.items():
            if function not in fns:
                continue
            wanted = {f"{ev.get('Method', '').upper()} {ev.get('Path')}" for _, ev in events_of(fns[function], "HttpApi")}
            if keys != wanted:
                missing, extra = sorted(wanted - keys), sorted(keys - wanted)
                out.append(self.problem(["Resources", api],
                                        f"{api} serves {function} unlike its HttpApi events: missing {missing}, extra {extra}"))
        return out


class RulesUseOnlyRuleFunctions(ServicingRule):
    id = "E9140"
    shortdesc = "The Rules section uses only rule functions"
    description = (
        "Issue #32: an assertion written with Fn::Join (to test a list parameter for emptiness) "
        "passed cfn-lint and every local check, and CloudFormation refused the whole stack: the "
        "Rules section takes only Ref and the rule functions (Fn::And, Fn::Contains, "
        "Fn::EachMemberEquals, Fn::EachMemberIn, Fn::Equals, Fn::Not, Fn::Or, Fn::RefAll, "
        "Fn::ValueOf, Fn::ValueOfAll)."
    )
    allowed = {
        "Ref", "Fn::And", "Fn::Contains", "Fn::EachMemberEquals", "Fn::EachMemberIn", "Fn::Equals",
        "Fn::Not", "Fn::Or", "Fn::RefAll", "Fn::ValueOf", "Fn::ValueOfAll",
    }

    def match(self, cfn):
        out = []

        def walk(value, path):
            if isinstance(value, dict):
                for key, inner in value.items():
                    if (key == "Ref" or key.startswith("Fn::")) and key not in self.allowed:
                        out.append(self.problem(path, f"{'/'.join(map(str, path[1:]))}: {key} is not a rule function"))
                    walk(inner, path + [key])
            elif isinstance(value, list):
                for i, inner in enumerate(value):
                    walk(inner, path + [i])

        for name, rule in (cfn.template.get("Rules") or {}).items():
            walk(rule, ["Rules", name])
        return out


class BusEncryptedUnderItsOwnKey(ServicingRule):
    id = "E9141"
    shortdesc = "Every event bus and archive is encrypted under the template's key, bound to them, and the bus keeps what it cannot decrypt"
    description = (
        "Issue #31: the servicing bus (customer notices, money events) and its archive were on an "
        "AWS-owned key: no key this account controls, audits or can revoke. Every "
        "AWS::Events::EventBus and AWS::Events::Archive names a KMS key of the template "
        "(KmsKeyIdentifier); that key's policy lets events.amazonaws.com GenerateDataKey and "
        "Decrypt (and, for an archive, ReEncrypt) under kms:EncryptionContext:aws:events:event-bus:arn, "
        "DescribeKey bound to the account, and grants EventBridge no decryption without an "
        "encryption-context condition (else the binding is moot); the bus has a DeadLetterConfig "
        "whose queue admits events.amazonaws.com from the bus (aws:SourceArn) and is not encrypted "
        "under the bus's key (a disabled key would lose the dead letters too) - all of which the "
        "emulators ignore."
    )
    context = "kms:EncryptionContext:aws:events:event-bus:arn"

    @staticmethod
    def eventbridge_statements(key):
        for st in as_list((props(key).get("KeyPolicy") or {}).get("Statement") or []):
            if not isinstance(st, dict) or st.get("Effect") != "Allow":
                continue
            principal = st.get("Principal") if isinstance(st.get("Principal"), dict) else {}
            if "events.amazonaws.com" in as_list(principal.get("Service")):
                yield st

    @staticmethod
    def condition_keys(st):
        return {k for test in (st.get("Condition") or {}).values() if isinstance(test, dict) for k in test}

    def key_problems(self, cfn, owner, value, archive):
        all_res = cfn.template.get("Resources") or {}
        key_name = logical_id(value)
        key = all_res.get(key_name)
        if not isinstance(key, dict) or key.get("Type") != "AWS::KMS::Key":
            return [f"{owner}: KmsKeyIdentifier must name an AWS::KMS::Key of the template, not {value!r} (an AWS-owned key otherwise)"]
        out = []
        bound, described = set(), False
        for st in self.eventbridge_statements(key):
            keys = self.condition_keys(st)
            if self.context in keys:
                bound.update(actions(st))
            if "kms:DescribeKey" in actions(st) and keys & {"aws:SourceAccount", "aws:SourceArn", self.context}:
                described = True
            unbound = [a for a in actions(st) if a in ("kms:Decrypt", "kms:GenerateDataKey", "kms:*")]
            if unbound and not any(k.startswith("kms:EncryptionContext:") for k in keys):
                out.append(f"{owner}: {key_name}/{st.get('Sid', '?')} lets EventBridge {unbound} with no encryption-context condition: any bus of the account could use the key")
        wanted = {"kms:GenerateDataKey", "kms:Decrypt"} | ({"kms:ReEncrypt*"} if archive else set())
        lacking = sorted(wanted - bound)
        if lacking:
            out.append(f"{owner}: {key_name}'s policy must allow events.amazonaws.com {lacking} under {self.context}")
        if not described:
            out.append(f"{owner}: {key_name}'s policy must allow events.amazonaws.com kms:DescribeKey, bound to the account")
        return out

    def match(self, cfn):
        out = []
        all_res = cfn.template.get("Resources") or {}
        policies = list(resources(cfn, "AWS::SQS::QueuePolicy"))
        for kind in ("AWS::Events::EventBus", "AWS::Events::Archive"):
            for name, res in resources(cfn, kind):
                path = ["Resources", name, "Properties"]
                key = props(res).get("KmsKeyIdentifier")
                for message in self.key_problems(cfn, name, key, kind == "AWS::Events::Archive"):
                    out.append(self.problem(path, message))
                if kind != "AWS::Events::EventBus":
                    continue
                dlq = logical_id((props(res).get("DeadLetterConfig") or {}).get("Arn"))
                if dlq is None:
                    out.append(self.problem(path, f"{name}: a DeadLetterConfig keeps the events EventBridge cannot encrypt or decrypt"))
                    continue
                queue_key = logical_id(props(all_res.get(dlq) or {}).get("KmsMasterKeyId"))
                if queue_key is not None and queue_key == logical_id(key):
                    out.append(self.problem(path, f"{name}: its dead-letter queue {dlq} is encrypted under the bus's own key {queue_key}: when that key fails, the dead letters are lost too"))
                admitted = any(
                    dlq in [logical_id(q) for q in as_list(props(policy).get("Queues") or [])]
                    and st.get("Effect") == "Allow"
                    and "sqs:SendMessage" in actions(st)
                    and name in [logical_id(a) for test in (st.get("Condition") or {}).values() if isinstance(test, dict)
                                 for a in as_list(test.get("aws:SourceArn"))]
                    for _, policy in policies
                    for st in as_list((props(policy).get("PolicyDocument") or {}).get("Statement") or [])
                    if isinstance(st, dict)
                )
                if not admitted:
                    out.append(self.problem(path, f"{name}: its dead-letter queue {dlq} must admit events.amazonaws.com sqs:SendMessage with aws:SourceArn {name}"))
        return out


# What only the break-glass role may do to a secret whose value keys the evidence.
SECRET_GUARDED = {
    "secretsmanager:PutSecretValue", "secretsmanager:UpdateSecret",
    "secretsmanager:UpdateSecretVersionStage", "secretsmanager:RotateSecret",
    "secretsmanager:DeleteSecret", "secretsmanager:PutResourcePolicy",
    "secretsmanager:DeleteResourcePolicy",
}


class SecretsReadOnlyByTheirReaders(ServicingRule):
    id = "E9142"
    shortdesc = "A secret of the template is read only by the roles granted it, changed only by break-glass"
    description = (
        "Issue #31: the content key secret was guarded by the functions' own IAM grants alone, "
        "so any other principal the account's IAM lets read secrets (an administrator, another "
        "team's role) could read it and test the 7-year archive's content keys against guessed "
        "references, or replace or delete it. Every secret of the template has a resource "
        "policy, present with the default parameters (Secrets Manager refuses public ones: "
        "BlockPublicPolicy), that denies secretsmanager:GetSecretValue to every principal but "
        "exactly the roles the template grants it to, and the changes and deletion to every "
        "principal but one (Deny, Principal *, ArnNotEquals aws:PrincipalArn)."
    )

    def match(self, cfn):
        out = []
        policies = list(resources(cfn, "AWS::SecretsManager::ResourcePolicy"))
        roles = list(resources(cfn, "AWS::IAM::Role"))
        for name, _secret in resources(cfn, "AWS::SecretsManager::Secret"):
            readers = {role_name for role_name, role in roles
                       if grants(cfn, role_statements(role), "secretsmanager:GetSecretValue", name)}
            mine = [(p, policy) for p, policy in policies if logical_id(props(policy).get("SecretId")) == name]
            if not mine:
                out.append(self.problem(["Resources", name], (
                    f"{name}: no resource policy - any principal the account's IAM lets read "
                    f"secrets reads it; deny GetSecretValue to all but {sorted(readers)}")))
                continue
            policy_name, policy = mine[0]
            path = ["Resources", policy_name]
            if not on_by_default(cfn, policy):
                out.append(self.problem(path, f"{policy_name}: off with the default parameters"))
            if props(policy).get("BlockPublicPolicy") is not True:
                out.append(self.problem(path, f"{policy_name}: BlockPublicPolicy: true (Secrets Manager then refuses a policy that opens it)"))
            exempt_from_reading = None
            guarded = set()
            document = props(policy).get("ResourcePolicy") or {}
            for st in as_list(document.get("Statement") or []):
                if not isinstance(st, dict) or st.get("Effect") != "Deny" or st.get("Principal") not in ("*", {"AWS": "*"}):
                    continue
                conditions = st.get("Condition") or {}
                exempt = [arn for test in ("ArnNotEquals", "ArnNotLike")
                          for arn in as_list((conditions.get(test) or {}).get("aws:PrincipalArn") or [])]
                if covers(actions(st), "secretsmanager:GetSecretValue"):
                    # A role of the template by its logical id, anything else as written.
                    exempt_from_reading = {logical_id(arn) or str(text(arn)) for arn in exempt}
                if exempt:
                    guarded |= {a for a in SECRET_GUARDED if covers(actions(st), a)}
            if exempt_from_reading is None:
                out.append(self.problem(path, f"{policy_name}: it must deny secretsmanager:GetSecretValue to every principal but {sorted(readers)}"))
            elif exempt_from_reading != readers:
                out.append(self.problem(path, (
                    f"{policy_name}: its read deny exempts {sorted(exempt_from_reading)}, "
                    f"but the roles granted GetSecretValue on {name} are {sorted(readers)}")))
            missing = SECRET_GUARDED - guarded
            if missing:
                out.append(self.problem(path, (
                    f"{policy_name}: it must deny {', '.join(sorted(missing))} to every principal "
                    "but the break-glass role (Deny, Principal *, ArnNotEquals aws:PrincipalArn)")))
        return out
