//! The chart's ValidatingAdmissionPolicy (templates/validatingadmissionpolicy.yaml, its logic in
//! charts/pinhook/cel/pinned-pods-policy.yaml), as `helm template` renders it for Kubernetes
//! 1.32, evaluated with a CEL interpreter the way the apiserver evaluates it (the variables in
//! order, then the validation), beside pinhook's own `/validate` under the same policy and the
//! same namespace labels. The apiserver's policy must never refuse what `/validate` admits (it
//! holds while pinhook is down, so a stricter one would refuse what pinhook lets in), and must
//! refuse, naming the image, every Pod write `/validate` refuses for an image not pinned to a
//! digest: tags, names without a tag, malformed digests, in containers, init containers,
//! ephemeral containers and image volumes, in enforce namespaces, whatever the exemptions'
//! spelling of a Docker Hub name. Checked on Pods built for each rule and on every captured
//! AdmissionReview the tests use. The same objects go to the real 1.32 apiserver in the e2e
//! scenario `apiserver-policy-enforces-while-pinhook-is-down`.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::cluster::chart::{get, render};
use crate::common::pinhook::{captured_reviews, review_fixture, Options, TestPinhook};
use crate::common::registry::{RegistryAuth, TestRegistry};
use crate::common::requests::{pod_review, seeded, BASIC_POD};
use pinhook::cluster::{LabelError, NamespaceLabels};
use pinhook::policy::Policy;

const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The rendered policy, compiled: its variables in order, its validation and message.
struct ApiserverPolicy {
    env: Arc<cel::Env>,
    variables: Vec<(String, cel::Program)>,
    validation: cel::Program,
    message: cel::Program,
}

/// The chart's policy values (`policy:` below) as YAML, for Helm and for pinhook alike.
fn policy_yaml(mode: &str, host: &str) -> String {
    format!(
        "mode: {mode}\nexempt:\n  namespaces: [\"team-*\", \"tools\"]\n  images:\n    \
         - \"docker.io/library/busybox:*\"\n    - \"{host}/exempt/*\"\n    - \"quay.io/x/a?c\"\n"
    )
}

impl ApiserverPolicy {
    /// The chart rendered for 1.32 with `policy` as its policy.
    fn rendered(policy: &str) -> ApiserverPolicy {
        let dir = tempfile::tempdir().expect("tempdir");
        let values = dir.path().join("values.yaml");
        let indented: String = policy.lines().map(|l| format!("  {l}\n")).collect();
        std::fs::write(
            &values,
            format!("webhook:\n  apiserverPolicy: true\npolicy:\n{indented}"),
        )
        .expect("values written");
        let values = values.to_string_lossy().into_owned();
        let objects = render(&["--kube-version", "1.32.0", "-f", &values]);
        let vap = get(&objects, "ValidatingAdmissionPolicy", "pinhook-pinned-pods");
        let binding = get(
            &objects,
            "ValidatingAdmissionPolicyBinding",
            "pinhook-pinned-pods",
        );
        assert_eq!(binding["spec"]["policyName"], "pinhook-pinned-pods");
        assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
        let mut env = cel::Env::stdlib();
        // The apiserver's CEL has the strings library (join); the rest is standard.
        env.add_extension(cel::extensions::strings)
            .expect("strings extension");
        let env = Arc::new(env);
        let compile = |what: &str, source: &Value| {
            let source = source.as_str().unwrap_or_else(|| panic!("{what}: no text"));
            env.compile(source)
                .unwrap_or_else(|e| panic!("{what} does not compile: {e:?}\n{source}"))
        };
        let variables = vap["spec"]["variables"]
            .as_array()
            .expect("variables")
            .iter()
            .map(|v| {
                let name = v["name"].as_str().expect("a name").to_string();
                let program = compile(&name, &v["expression"]);
                (name, program)
            })
            .collect();
        let validations = vap["spec"]["validations"].as_array().expect("validations");
        assert_eq!(validations.len(), 1, "one validation");
        ApiserverPolicy {
            validation: compile("validation", &validations[0]["expression"]),
            message: compile("message", &validations[0]["messageExpression"]),
            variables,
            env,
        }
    }

    /// The apiserver's answer for `review` in a namespace labelled `label`: Ok when admitted,
    /// else the message. Panics on a CEL error (the policy's failurePolicy Fail would refuse).
    fn judge(&self, review: &Value, label: Option<&str>) -> Result<(), String> {
        self.judge_with(review, label, None)
    }

    /// [`Self::judge`], with `exemptImages` set to `exempt_images` (a regex) instead of the
    /// rendered one.
    fn judge_with(
        &self,
        review: &Value,
        label: Option<&str>,
        exempt_images: Option<&str>,
    ) -> Result<(), String> {
        let request = &review["request"];
        let mut context = cel::Context::with_env(self.env.clone());
        let mut labels = serde_json::Map::new();
        if let Some(label) = label {
            labels.insert("pinhook.dev/mode".into(), json!(label));
        }
        let namespace = json!({"metadata": {"name": request["namespace"], "labels": labels}});
        for (name, value) in [
            ("request", request),
            ("object", &request["object"]),
            ("oldObject", &request["oldObject"]),
            ("namespaceObject", &namespace),
        ] {
            context
                .add_variable(name, cel::to_value(value).expect("as CEL"))
                .expect(name);
        }
        let mut variables: HashMap<String, cel::Value> = HashMap::new();
        for (name, program) in &self.variables {
            let value = match (name.as_str(), exempt_images) {
                ("exemptImages", Some(regex)) => cel::Value::from(regex.to_string()),
                _ => program
                    .execute(&context)
                    .unwrap_or_else(|e| panic!("variables.{name} errs ({e:?}) for {review}")),
            };
            variables.insert(name.clone(), value);
            context.add_variable_from_value("variables", variables.clone());
        }
        // The apiserver works the message out for every write, admitted or not.
        let message = match self.message.execute(&context) {
            Ok(cel::Value::String(message)) => message.to_string(),
            other => panic!("the message must be a string, got {other:?} for {review}"),
        };
        match self.validation.execute(&context) {
            Ok(cel::Value::Bool(true)) => Ok(()),
            Ok(cel::Value::Bool(false)) => Err(message),
            other => panic!("the validation must be a bool, got {other:?} for {review}"),
        }
    }
}

/// Namespace labels as the apiserver gives them to the policy: `pinhook.dev/mode` per namespace.
struct Labels(HashMap<String, String>);

#[async_trait]
impl NamespaceLabels for Labels {
    async fn label(&self, namespace: &str, _label: &str) -> Result<Option<String>, LabelError> {
        Ok(self.0.get(namespace).cloned())
    }
}

/// One rule: a review, its namespace's label, and what both must answer.
struct Case {
    what: &'static str,
    review: Value,
    label: Option<&'static str>,
    /// The apiserver's policy admits.
    admitted: bool,
    /// pinhook's /validate admits (differs only where the policy is more lenient).
    pinhook_admits: bool,
}

fn case(what: &'static str, review: Value, admitted: bool) -> Case {
    Case {
        what,
        review,
        label: None,
        admitted,
        pinhook_admits: admitted,
    }
}

/// A Pod UPDATE: `old` becomes the old object of `new`.
fn update(mut new: Value, old: &Value) -> Value {
    new["request"]["operation"] = json!("UPDATE");
    new["request"]["oldObject"] = old["request"]["object"].clone();
    new
}

async fn pinhook_with(registry: &TestRegistry, policy: &str, labels: &Labels) -> TestPinhook {
    let policy: Policy = serde_saphyr::from_str(policy).expect("policy");
    TestPinhook::start_with(
        registry,
        Options {
            policy,
            namespaces: Arc::new(Labels(labels.0.clone())),
            ..Options::default()
        },
    )
    .await
}

/// Every case under `policy`: the apiserver's answer as expected, pinhook's as expected, and
/// never a refusal where pinhook admits.
async fn judged_alike(registry: &TestRegistry, policy: &str, cases: Vec<Case>) {
    let vap = ApiserverPolicy::rendered(policy);
    let mut labels = HashMap::new();
    for (i, case) in cases.iter().enumerate() {
        if let Some(label) = case.label {
            labels.insert(format!("labelled-{i}"), label.to_string());
        }
    }
    let labels = Labels(labels);
    let pinhook = pinhook_with(registry, policy, &labels).await;
    for (i, mut case) in cases.into_iter().enumerate() {
        if case.label.is_some() {
            let namespace = format!("labelled-{i}");
            case.review["request"]["namespace"] = json!(namespace);
            case.review["request"]["object"]["metadata"]["namespace"] = json!(namespace);
        }
        let answer = vap.judge(&case.review, case.label);
        let validated = pinhook.validate(&case.review).await;
        let pinhook_admits = validated["response"]["allowed"] == json!(true);
        assert!(
            answer.is_ok() || !pinhook_admits,
            "{}: the apiserver's policy refuses what pinhook admits: {answer:?}",
            case.what
        );
        assert_eq!(
            answer.is_ok(),
            case.admitted,
            "{}: the apiserver's policy answered {answer:?}",
            case.what
        );
        assert_eq!(
            pinhook_admits, case.pinhook_admits,
            "{}: pinhook answered {validated}",
            case.what
        );
    }
}

#[tokio::test]
async fn the_apiserver_policy_refuses_what_validate_refuses_for_a_tag_and_nothing_it_admits() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let host = registry.host();
    let pod = |image: &str| pod_review(&registry, image);
    let tag = format!("{host}/team/app:1.0");
    let pinned = format!("{host}/team/app:1.0@sha256:{HEX}");
    let mut cases = vec![
        case("a tag", pod(&tag), false),
        case(
            "a name and digest",
            pod(&format!("{host}/team/app@sha256:{HEX}")),
            true,
        ),
        case("a tag and digest", pod(&pinned), true),
        case("a Docker Hub tag", pod("nginx:1.25"), false),
        case("a Docker Hub name without tag", pod("nginx"), false),
        case(
            "a sha512 digest",
            pod(&format!("nginx@sha512:{HEX}{HEX}")),
            true,
        ),
        case("a short digest", pod("nginx@sha256:0123"), false),
        case(
            "an uppercase digest",
            pod(&format!("nginx@sha256:{}", HEX.to_uppercase())),
            false,
        ),
        case("an uppercase tag name", pod("NGINX:1"), false),
        // Exempt images, as pinhook reads the name (docker.io/library/ added, :latest).
        case("exempt: busybox:1.36", pod("busybox:1.36"), true),
        case("exempt: busybox (latest)", pod("busybox"), true),
        case("exempt: library/busybox:1", pod("library/busybox:1"), true),
        case(
            "exempt: docker.io/busybox:1",
            pod("docker.io/busybox:1"),
            true,
        ),
        case(
            "exempt: index.docker.io/library/busybox:1",
            pod("index.docker.io/library/busybox:1"),
            true,
        ),
        case(
            "exempt: docker.io/library/busybox:1",
            pod("docker.io/library/busybox:1"),
            true,
        ),
        case("exempt: a ? glob", pod("quay.io/x/abc"), true),
        case("not exempt: a ? glob of two", pod("quay.io/x/abbc"), false),
        case(
            "exempt: a registry path",
            pod(&format!("{host}/exempt/tool:2")),
            true,
        ),
        case(
            "not exempt: another path",
            pod(&format!("{host}/exempted/tool:2")),
            false,
        ),
        case(
            "not exempt: busybox elsewhere",
            pod("quay.io/busybox:1"),
            false,
        ),
        case(
            "not exempt: docker.io/library/busybox2",
            pod("busybox2:1"),
            false,
        ),
        Case {
            // pinhook refuses the reference itself; the apiserver's policy reads only the digest
            pinhook_admits: false,
            ..case(
                "an invalid name with a digest",
                pod(&format!("{host}/Team/App@sha256:{HEX}")),
                true,
            )
        },
    ];

    // Exempt namespaces; namespace labels.
    let mut in_team = pod(&tag);
    in_team["request"]["namespace"] = json!("team-a");
    cases.push(case("an exempt namespace (team-*)", in_team, true));
    let mut in_tools = pod(&tag);
    in_tools["request"]["namespace"] = json!("tools-2");
    cases.push(case("not exempt: tools-2", in_tools, false));
    for (label, admitted) in [
        ("audit", true),
        ("off", true),
        ("enforce", false),
        ("Enforce", false),
        ("", false),
    ] {
        cases.push(Case {
            label: Some(label),
            ..case("a tag in a labelled namespace", pod(&tag), admitted)
        });
    }

    // Every image field of a Pod.
    let spec_with = |field: &str, value: Value| {
        let mut review = pod(&pinned);
        review["request"]["object"]["spec"][field] = value;
        review
    };
    cases.push(case(
        "an init container's tag",
        spec_with("initContainers", json!([{"name": "init", "image": tag}])),
        false,
    ));
    cases.push(case(
        "an ephemeral container's tag at CREATE",
        spec_with(
            "ephemeralContainers",
            json!([{"name": "debug", "image": tag}]),
        ),
        false,
    ));
    cases.push(case(
        "an image volume's tag",
        spec_with(
            "volumes",
            json!([{"name": "data", "emptyDir": {}},
                   {"name": "tools", "image": {"reference": tag, "pullPolicy": "IfNotPresent"}}]),
        ),
        false,
    ));
    cases.push(case(
        "an image volume's digest, an empty volume",
        spec_with(
            "volumes",
            json!([{"name": "data", "emptyDir": {}},
                   {"name": "tools", "image": {"reference": pinned}}]),
        ),
        true,
    ));

    // Mirror Pods: from their own node only.
    let mirror = |user: &str| {
        let mut review = pod(&tag);
        review["request"]["userInfo"]["username"] = json!(user);
        let object = &mut review["request"]["object"];
        object["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "abc"});
        object["spec"]["nodeName"] = json!("node-1");
        review
    };
    cases.push(case(
        "a mirror Pod from its node",
        mirror("system:node:node-1"),
        true,
    ));
    cases.push(case(
        "a mirror Pod from another node",
        mirror("system:node:node-2"),
        false,
    ));
    cases.push(case(
        "a mirror annotation from a user",
        mirror("admin"),
        false,
    ));

    // Updates: only what changed.
    let tagged_pod = pod(&tag);
    cases.push(case(
        "an update keeping its tag",
        update(pod(&tag), &tagged_pod),
        true,
    ));
    cases.push(case(
        "an update to another tag",
        update(pod(&format!("{host}/team/app:2.0")), &tagged_pod),
        false,
    ));
    let mut renamed = pod(&tag);
    renamed["request"]["object"]["spec"]["containers"][0]["name"] = json!("renamed");
    cases.push(case(
        "an update renaming the tagged container",
        update(renamed, &tagged_pod),
        false,
    ));
    let debug = |image: &str| {
        let mut review = update(pod(&tag), &tagged_pod);
        review["request"]["subResource"] = json!("ephemeralcontainers");
        review["request"]["object"]["spec"]["ephemeralContainers"] =
            json!([{"name": "debug", "image": image}]);
        review
    };
    cases.push(case(
        "kubectl debug with a pinned image (containers' tags unchanged)",
        debug(&pinned),
        true,
    ));
    cases.push(case("kubectl debug with a tag", debug("busybox2:1"), false));

    let enforce = policy_yaml("enforce", &host);
    judged_alike(&registry, &enforce, cases).await;

    // The message names every image refused, as pinhook's reasons do.
    let vap = ApiserverPolicy::rendered(&enforce);
    let mut two = pod(&tag);
    two["request"]["object"]["spec"]["initContainers"] =
        json!([{"name": "init", "image": "nginx@sha256:0123"}]);
    assert_eq!(
        vap.judge(&two, None),
        Err(format!(
            "pinhook (enforced by the apiserver): image \"{tag}\": not pinned to a digest; \
             image \"nginx@sha256:0123\": invalid digest"
        ))
    );

    // The policy's own mode: audit admits unless the namespace says enforce.
    let audit = policy_yaml("audit", &host);
    let cases = vec![
        case("a tag under mode: audit", pod(&tag), true),
        Case {
            label: Some("enforce"),
            ..case(
                "a tag in an enforce namespace under mode: audit",
                pod(&tag),
                false,
            )
        },
        Case {
            label: Some("bogus"),
            ..case("a tag under a bogus label and mode: audit", pod(&tag), true)
        },
    ];
    judged_alike(&registry, &audit, cases).await;
}

/// Every captured AdmissionReview: the policy evaluates without error, and refuses none that
/// pinhook's /validate admits under the same enforce policy; the tagged Pod captures are refused.
#[tokio::test]
async fn every_captured_review_is_judged_without_error_and_never_stricter_than_validate() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let policy = policy_yaml("enforce", &registry.host());
    let vap = ApiserverPolicy::rendered(&policy);
    let pinhook = pinhook_with(&registry, &policy, &Labels(HashMap::new())).await;
    let (mut judged, mut refused) = (0, 0);
    for fixture in captured_reviews()
        .into_iter()
        .filter(|f| f.contains("/pod-"))
    {
        let review = review_fixture(&fixture, &registry);
        judged += 1;
        if let Err(message) = vap.judge(&review, None) {
            refused += 1;
            let answer = pinhook.validate(&review).await;
            assert_eq!(
                answer["response"]["allowed"],
                json!(false),
                "{fixture}: the apiserver's policy refuses ({message}), pinhook admits"
            );
        }
    }
    assert!(judged >= 40, "{judged} captured Pod reviews judged");
    assert!(
        refused >= 10,
        "the tagged Pod captures are refused ({refused})"
    );
    drop(review_fixture(BASIC_POD, &registry));
}

/// Off by default; asked for, not rendered where it would refuse what pinhook admits
/// (onResolutionFailure: allow) nor before 1.30; its globs are pinhook's, anchored.
#[test]
fn rendered_from_1_30_unless_pinhook_admits_unpinned_images() {
    let rendered = |args: &[&str]| {
        render(args)
            .iter()
            .any(|o| o["kind"] == "ValidatingAdmissionPolicy")
    };
    assert!(!rendered(&["--kube-version", "1.32.0"]), "off by default");
    let has = |args: &[&str]| {
        let mut args = args.to_vec();
        args.extend(["--set", "webhook.apiserverPolicy=true"]);
        rendered(&args)
    };
    assert!(has(&["--kube-version", "1.30.0"]));
    assert!(has(&["--kube-version", "1.35.0"]));
    assert!(!has(&["--kube-version", "1.29.9"]));
    assert!(!has(&["--kube-version", "1.20.2"]));
    assert!(!has(&[
        "--kube-version",
        "1.32.0",
        "--set",
        "policy.onResolutionFailure=allow"
    ]));
    let objects = render(&[
        "--kube-version",
        "1.32.0",
        "--set",
        "webhook.apiserverPolicy=true",
        "--set-json",
        r#"policy.exempt={"images":["a.b/c*d?","docker.io/library/x:*"],"namespaces":["ns-*"]}"#,
    ]);
    let vap = get(&objects, "ValidatingAdmissionPolicy", "pinhook-pinned-pods");
    let variable = |name: &str| {
        vap["spec"]["variables"]
            .as_array()
            .expect("variables")
            .iter()
            .find(|v| v["name"] == name)
            .map(|v| v["expression"].clone())
    };
    assert_eq!(variable("policyMode"), Some(json!("\"audit\"")));
    assert_eq!(
        variable("exemptNamespaces"),
        Some(json!(r#""^(?:ns-.*)$""#))
    );
    assert_eq!(
        variable("exemptImages"),
        Some(json!(r#""^(?:a\\.b/c.*d.|docker\\.io/library/x:.*)$""#))
    );
    let none = render(&[
        "--kube-version",
        "1.32.0",
        "--set",
        "webhook.apiserverPolicy=true",
    ]);
    let vap = get(&none, "ValidatingAdmissionPolicy", "pinhook-pinned-pods");
    for name in ["exemptNamespaces", "exemptImages"] {
        let expression = vap["spec"]["variables"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == name))
            .map(|v| v["expression"].clone());
        assert_eq!(expression, Some(json!("\"\"")), "{name} without globs");
    }
}

/// A glob of pinhook's policy as the chart's `pinhook.globsRegex` renders it (Go's QuoteMeta
/// escapes fewer characters than `regex::escape`, to the same effect).
fn glob_regex(glob: &str) -> String {
    format!(
        "^(?:{})$",
        regex::escape(glob).replace("\\*", ".*").replace("\\?", ".")
    )
}

/// Exemptions by image, on random names and globs: the apiserver's policy exempts exactly what
/// pinhook exempts, for every name pinhook reads (bare names, library/, docker.io/ with and
/// without library/, index.docker.io, hosts with dots, ports, capitals, localhost; with and
/// without a tag), against globs made from pinhook's own readings of the name with wildcards in
/// random places, and globs written the other ways people write them.
#[tokio::test]
async fn image_exemptions_match_pinhooks_on_random_names_and_globs() {
    let registry = TestRegistry::start(RegistryAuth::None).await;
    let vap = ApiserverPolicy::rendered(&policy_yaml("enforce", &registry.host()));
    let hosts = [
        "",
        "docker.io/",
        "index.docker.io/",
        "quay.io/",
        "localhost/",
        "localhost:5000/",
        "Registry.Example/",
        "registry.example:5000/",
    ];
    let paths = [
        "nginx",
        "library/nginx",
        "team/app",
        "library/team/app",
        "l",
    ];
    let tags = ["", ":1.25", ":latest"];
    let written = [
        "docker.io/*/nginx:*",
        "*/library/*",
        "docker.io/l*",
        "docker.io*",
        "docker.io/library/*",
        "*nginx*",
        "docker.io/nginx:*",
        "index.docker.io/*",
        "*:latest",
        "*/team/*",
    ];
    let mut next = seeded(0x2545_f491_4f6c_dd1d);
    let (mut judged, mut exempt) = (0, 0);
    for host in hosts {
        for path in paths {
            for tag in tags {
                let name = format!("{host}{path}{tag}");
                let Ok(reference) = pinhook::reference::Reference::parse(&name) else {
                    continue;
                };
                let forms = [reference.to_string(), reference.tag_reference()];
                let mut globs: Vec<String> = written.iter().map(|g| g.to_string()).collect();
                for form in &forms {
                    globs.push(form.clone());
                    for _ in 0..6 {
                        let chars: Vec<char> = form.chars().collect();
                        let (a, b) = (next(chars.len() + 1), next(chars.len() + 1));
                        let (from, to) = (a.min(b), a.max(b));
                        let mut glob: String = chars[..from].iter().collect();
                        glob.push(if next(3) == 0 { '?' } else { '*' });
                        glob.extend(&chars[to.min(chars.len())..]);
                        globs.push(glob);
                    }
                }
                for glob in globs {
                    let text = format!(
                        "mode: enforce\nexempt:\n  images: [{}]\n",
                        serde_json::to_string(&glob).expect("a JSON string")
                    );
                    let policy = Policy::parse(&text).unwrap_or_else(|e| panic!("{glob:?}: {e}"));
                    let pinhook_exempts = policy.is_exempt_image(&reference);
                    let review = pod_review(&registry, &name);
                    let admitted = vap
                        .judge_with(&review, None, Some(&glob_regex(&glob)))
                        .is_ok();
                    assert_eq!(
                        admitted, pinhook_exempts,
                        "{name:?} under exempt.images [{glob:?}]: pinhook reads it as {forms:?}"
                    );
                    judged += 1;
                    exempt += usize::from(admitted);
                }
            }
        }
    }
    assert!(judged > 1000, "{judged} (name, glob) pairs judged");
    assert!(
        exempt > judged / 5 && exempt < judged * 4 / 5,
        "{exempt} of {judged} exempt: both kinds are tested"
    );
}
