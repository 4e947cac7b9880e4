use super::*;

const HOUR: Duration = Duration::from_secs(3600);

fn settings() -> Settings {
    Settings {
        names: vec![
            "pinhook".into(),
            "pinhook.pinhook-system.svc".into(),
            "127.0.0.1".into(),
        ],
        common_name: "pinhook.pinhook-system.svc".into(),
        ca_lifetime: 3 * HOUR,
        cert_lifetime: HOUR,
        grace: Duration::from_secs(60),
    }
}

fn written(step: Step) -> (Contents, Vec<&'static str>) {
    match step {
        Step::Write { contents, reasons } => (contents, reasons),
        Step::Keep => panic!("expected a write, got Keep"),
    }
}

fn after(now: OffsetDateTime, d: Duration) -> OffsetDateTime {
    now + d
}

fn bundle_of(contents: &Contents, now: OffsetDateTime) -> Vec<Parsed> {
    valid_bundle(contents.data.get(BUNDLE), now)
}

fn cert(contents: &Contents, key: &str) -> Parsed {
    parse_one(&contents.data[key]).expect("parses")
}

/// A fresh Secret at `now`.
fn start(now: OffsetDateTime) -> Contents {
    written(plan(&Contents::default(), now, &settings(), false).expect("plans")).0
}

#[test]
fn an_empty_secret_gets_a_ca_and_a_serving_certificate_it_signed_then_stays() {
    let now = OffsetDateTime::now_utc();
    let (contents, reasons) =
        written(plan(&Contents::default(), now, &settings(), false).expect("plans"));
    assert!(reasons.iter().any(|r| r.contains("new CA")), "{reasons:?}");
    let signer = cert(&contents, SIGNER_CERT);
    let leaf = cert(&contents, CERT);
    assert!(signer.is_ca && !leaf.is_ca);
    assert!(signed_by(&leaf, &signer));
    assert!(key_matches(&leaf, &contents.data[KEY]));
    assert_eq!(names_of(&leaf), expected_names(&settings().names));
    assert_eq!(bundle_of(&contents, now).len(), 1);
    assert_eq!(contents.data[BUNDLE], signer.pem);
    assert!(serving_pair(&contents.data, &settings(), now).is_some());
    // Nothing to do a minute later, whether or not the webhooks carry the bundle yet.
    for in_sync in [false, true] {
        let step = plan(
            &contents,
            after(now, Duration::from_secs(60)),
            &settings(),
            in_sync,
        );
        assert!(matches!(step, Ok(Step::Keep)), "{step:?}");
    }
}

#[test]
fn a_serving_certificate_near_expiry_is_reissued_by_the_same_ca() {
    let now = OffsetDateTime::now_utc();
    let contents = start(now);
    // 1 h lifetime: renewed once less than 20 min remain.
    let later = after(now, Duration::from_secs(41 * 60));
    let (renewed, reasons) = written(plan(&contents, later, &settings(), true).expect("plans"));
    assert_eq!(
        reasons,
        vec!["serving certificate missing, wrong or near expiry: reissued"]
    );
    assert_ne!(renewed.data[CERT], contents.data[CERT]);
    assert_eq!(renewed.data[SIGNER_CERT], contents.data[SIGNER_CERT]);
    assert_eq!(renewed.data[BUNDLE], contents.data[BUNDLE]);
    assert!(signed_by(
        &cert(&renewed, CERT),
        &cert(&renewed, SIGNER_CERT)
    ));
}

#[test]
fn a_ca_rotates_in_two_steps_and_the_previous_ca_stays_trusted() {
    let now = OffsetDateTime::now_utc();
    let contents = start(now);
    let old_ca = cert(&contents, SIGNER_CERT);
    // 3 h CA: a next CA is published once less than 1 h remains.
    let t1 = after(now, Duration::from_secs(2 * 3600 + 60));
    let (published, reasons) = written(plan(&contents, t1, &settings(), true).expect("plans"));
    assert!(
        reasons.contains(&"CA near expiry or longer-lived than configured: next CA published"),
        "{reasons:?}"
    );
    assert_eq!(published.published_at, Some(t1));
    let next = cert(&published, NEXT_CERT);
    let bundle = bundle_of(&published, t1);
    assert_eq!(bundle.len(), 2);
    assert!(bundle_has(&bundle, &old_ca) && bundle_has(&bundle, &next));
    // The serving certificate is still the old CA's: no apiserver has the new bundle yet.
    assert!(signed_by(&cert(&published, CERT), &old_ca));

    // Within the grace period, or before the webhooks carry the bundle: nothing moves.
    let early = after(t1, Duration::from_secs(30));
    assert!(matches!(
        plan(&published, early, &settings(), true),
        Ok(Step::Keep)
    ));
    let due = after(t1, Duration::from_secs(61));
    assert!(matches!(
        plan(&published, due, &settings(), false),
        Ok(Step::Keep)
    ));

    let (promoted, reasons) = written(plan(&published, due, &settings(), true).expect("plans"));
    assert!(reasons.contains(&"next CA now signs"), "{reasons:?}");
    assert_eq!(promoted.data[SIGNER_CERT], next.pem);
    assert!(!promoted.data.contains_key(NEXT_CERT) && !promoted.data.contains_key(NEXT_KEY));
    assert_eq!(promoted.published_at, None);
    assert!(signed_by(&cert(&promoted, CERT), &next));
    // Replicas still serving the old CA's certificate stay trusted while they switch.
    let bundle = bundle_of(&promoted, due);
    assert!(bundle_has(&bundle, &old_ca) && bundle_has(&bundle, &next));

    // Once the old CA has expired it leaves the bundle.
    let expired = after(now, 3 * HOUR + Duration::from_secs(60));
    let (pruned, _) = written(plan(&promoted, expired, &settings(), true).expect("plans"));
    let bundle = bundle_of(&pruned, expired);
    assert!(!bundle.iter().any(|c| c.der == old_ca.der));
    assert!(bundle_has(&bundle, &next));
}

#[test]
fn hostile_or_broken_contents_are_replaced_not_trusted() {
    let now = OffsetDateTime::now_utc();
    let good = start(now);
    let other = start(now);
    let cases: Vec<(&str, Contents)> = vec![
        ("garbage everywhere", {
            let mut c = Contents::default();
            for key in [BUNDLE, SIGNER_CERT, SIGNER_KEY, CERT, KEY] {
                c.data.insert(
                    key.into(),
                    "-----BEGIN CERTIFICATE-----\nnot base64\n".into(),
                );
            }
            c
        }),
        ("signer key of another CA", {
            let mut c = good.clone();
            c.data
                .insert(SIGNER_KEY.into(), other.data[SIGNER_KEY].clone());
            c
        }),
        ("serving key of another certificate", {
            let mut c = good.clone();
            c.data.insert(KEY.into(), other.data[KEY].clone());
            c
        }),
        ("serving certificate of another CA", {
            let mut c = good.clone();
            c.data.insert(CERT.into(), other.data[CERT].clone());
            c.data.insert(KEY.into(), other.data[KEY].clone());
            c
        }),
        ("a serving certificate as signer", {
            let mut c = good.clone();
            c.data.insert(SIGNER_CERT.into(), good.data[CERT].clone());
            c.data.insert(SIGNER_KEY.into(), good.data[KEY].clone());
            c
        }),
        ("huge bundle", {
            let mut c = good.clone();
            c.data.insert(BUNDLE.into(), good.data[BUNDLE].repeat(200));
            c
        }),
    ];
    for (name, contents) in cases {
        let (fixed, _) = written(plan(&contents, now, &settings(), true).expect(name));
        let signer = cert(&fixed, SIGNER_CERT);
        let leaf = cert(&fixed, CERT);
        assert!(signer.is_ca, "{name}");
        assert!(key_matches(&signer, &fixed.data[SIGNER_KEY]), "{name}");
        assert!(signed_by(&leaf, &signer), "{name}");
        assert!(key_matches(&leaf, &fixed.data[KEY]), "{name}");
        let bundle = bundle_of(&fixed, now);
        assert!(
            bundle_has(&bundle, &signer) && bundle.len() <= MAX_BUNDLE,
            "{name}"
        );
        assert!(fixed.data[BUNDLE].len() < 8 << 10, "{name}");
    }
}

#[test]
fn changed_names_reissue_the_serving_certificate() {
    let now = OffsetDateTime::now_utc();
    let contents = start(now);
    let mut more = settings();
    more.names.push("pinhook.example".into());
    let (renamed, _) = written(plan(&contents, now, &more, true).expect("plans"));
    assert_eq!(renamed.data[SIGNER_CERT], contents.data[SIGNER_CERT]);
    assert!(names_of(&cert(&renamed, CERT)).contains(&"pinhook.example".to_string()));
}

#[test]
fn foreign_cas_in_the_bundle_are_dropped_never_carried_into_ca_bundles() {
    let now = OffsetDateTime::now_utc();
    let cas: Vec<Contents> = (0..5)
        .map(|i| start(now + Duration::from_secs(i)))
        .collect();
    let mut contents = cas[4].clone();
    let bundle: String = cas.iter().map(|c| c.data[BUNDLE].clone()).collect();
    contents.data.insert(BUNDLE.into(), bundle);
    let later = now + Duration::from_secs(10);
    let (fixed, reasons) = written(plan(&contents, later, &settings(), true).expect("plans"));
    assert_eq!(reasons, vec!["trust bundle or keys out of date"]);
    let kept = bundle_of(&fixed, later);
    assert_eq!(kept.len(), 1);
    assert!(bundle_has(&kept, &cert(&cas[4], SIGNER_CERT)));
    for foreign in &cas[..4] {
        assert!(!bundle_has(&kept, &cert(foreign, SIGNER_CERT)));
    }
    // A foreign CA written as `previous.crt` is kept only while valid and never as a signer:
    // the Secret's writer is trusted that far, as with the signing key itself.
    assert!(matches!(
        plan(&fixed, later, &settings(), true),
        Ok(Step::Keep)
    ));
}

#[test]
fn a_promotion_keeps_exactly_the_demoted_signer_until_it_expires() {
    let now = OffsetDateTime::now_utc();
    let contents = start(now);
    let old_ca = cert(&contents, SIGNER_CERT);
    let t1 = after(now, Duration::from_secs(2 * 3600 + 60));
    let (published, _) = written(plan(&contents, t1, &settings(), true).expect("plans"));
    let due = after(t1, Duration::from_secs(61));
    let (promoted, _) = written(plan(&published, due, &settings(), true).expect("plans"));
    assert_eq!(promoted.data[PREVIOUS_CERT], old_ca.pem);
    assert_eq!(bundle_of(&promoted, due).len(), 2);
    assert!(matches!(
        plan(
            &promoted,
            after(due, Duration::from_secs(60)),
            &settings(),
            true
        ),
        Ok(Step::Keep)
    ));
    let expired = after(now, 3 * HOUR + Duration::from_secs(60));
    let (pruned, _) = written(plan(&promoted, expired, &settings(), true).expect("plans"));
    assert!(!pruned.data.contains_key(PREVIOUS_CERT));
}

#[test]
fn a_replica_serves_only_a_pair_the_apiserver_accepts() {
    let now = OffsetDateTime::now_utc();
    let good = start(now);
    let other = start(now);
    let s = settings();
    assert!(serving_pair(&good.data, &s, now).is_some());
    let mut mixed = good.data.clone();
    mixed.insert(KEY.into(), other.data[KEY].clone());
    assert!(
        serving_pair(&mixed, &s, now).is_none(),
        "key of another certificate"
    );
    assert!(serving_pair(&BTreeMap::new(), &s, now).is_none());
    // A matching pair from another CA: its key matches, but no caBundle carries its CA.
    let mut foreign = good.data.clone();
    foreign.insert(CERT.into(), other.data[CERT].clone());
    foreign.insert(KEY.into(), other.data[KEY].clone());
    assert!(
        serving_pair(&foreign, &s, now).is_none(),
        "another CA's pair"
    );
    // ... nor when its CA is written as the signer but left out of the bundle.
    let mut unbundled = foreign.clone();
    unbundled.insert(SIGNER_CERT.into(), other.data[SIGNER_CERT].clone());
    assert!(
        serving_pair(&unbundled, &s, now).is_none(),
        "signer not in the bundle"
    );
    // The CA's own key pair, names the service does not have, or an expired pair.
    let mut ca_pair = good.data.clone();
    ca_pair.insert(CERT.into(), good.data[SIGNER_CERT].clone());
    ca_pair.insert(KEY.into(), good.data[SIGNER_KEY].clone());
    assert!(
        serving_pair(&ca_pair, &s, now).is_none(),
        "a CA as serving pair"
    );
    let mut renamed = settings();
    renamed.names.push("elsewhere.example".into());
    assert!(
        serving_pair(&good.data, &renamed, now).is_none(),
        "other names"
    );
    let later = after(now, 2 * HOUR);
    assert!(serving_pair(&good.data, &s, later).is_none(), "expired");
}

#[test]
fn shorter_lifetimes_take_effect_at_once() {
    let now = OffsetDateTime::now_utc();
    let contents = start(now);
    let mut shorter = settings();
    shorter.ca_lifetime = Duration::from_secs(90);
    shorter.cert_lifetime = Duration::from_secs(30);
    shorter.grace = Duration::from_secs(5);
    let (published, reasons) = written(plan(&contents, now, &shorter, true).expect("plans"));
    assert!(
        reasons.iter().any(|r| r.contains("next CA published")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("reissued")),
        "{reasons:?}"
    );
    let leaf = cert(&published, CERT);
    assert!(leaf.not_after <= now + Duration::from_secs(31));
    // The next CA, once it signs, is not itself "longer-lived than configured".
    let due = now + Duration::from_secs(6);
    let (promoted, _) = written(plan(&published, due, &shorter, true).expect("plans"));
    assert!(matches!(
        plan(&promoted, due, &shorter, true),
        Ok(Step::Keep)
    ));
}

#[test]
fn an_impossible_publication_time_is_dropped_not_waited_for_and_never_panics() {
    let now = OffsetDateTime::now_utc();
    let contents = start(now);
    let t1 = now + 2 * HOUR + Duration::from_secs(60);
    let (published, _) = written(plan(&contents, t1, &settings(), true).expect("plans"));
    for at in [
        time::macros::datetime!(9999-12-31 23:59:59 UTC),
        t1 + Duration::from_secs(3600),
    ] {
        let mut odd = published.clone();
        odd.published_at = Some(at);
        let (fixed, reasons) = written(plan(&odd, t1, &settings(), true).expect("plans"));
        assert!(
            reasons.contains(&"next CA with an impossible publication time: dropped"),
            "{reasons:?}"
        );
        // A next CA is published afresh, at now.
        assert_eq!(fixed.published_at, Some(t1));
    }
}

#[test]
fn an_expired_signer_hands_over_to_the_published_next_ca() {
    let now = OffsetDateTime::now_utc();
    let contents = start(now);
    let t1 = now + 2 * HOUR + Duration::from_secs(60);
    let (published, _) = written(plan(&contents, t1, &settings(), false).expect("plans"));
    let next = cert(&published, NEXT_CERT);
    // The webhooks never caught up, and the signer expired meanwhile.
    let late = now + 3 * HOUR + Duration::from_secs(60);
    let (handed, reasons) = written(plan(&published, late, &settings(), false).expect("plans"));
    assert!(
        reasons.contains(&"signing CA unusable: the published next CA signs"),
        "{reasons:?}"
    );
    assert_eq!(handed.data[SIGNER_CERT], next.pem);
    assert!(signed_by(&cert(&handed, CERT), &next));
}

#[test]
fn a_certificate_capped_at_the_ca_expiry_is_not_rewritten_every_pass() {
    let now = OffsetDateTime::now_utc();
    let contents = start(now);
    // Promotion held back (webhooks never in sync): the CA nears expiry, the serving
    // certificate is capped at it and cannot get longer.
    let t1 = now + 2 * HOUR + Duration::from_secs(60);
    let (published, _) = written(plan(&contents, t1, &settings(), false).expect("plans"));
    // Reissued at t1 (the first one had expired), capped at the CA's expiry.
    assert_eq!(
        cert(&published, CERT).not_after,
        cert(&published, SIGNER_CERT).not_after
    );
    // 10 min left of a 1 h lifetime would ask for a reissue; a capped one is kept.
    let t3 = now + 2 * HOUR + Duration::from_secs(50 * 60);
    assert!(matches!(
        plan(&published, t3, &settings(), false),
        Ok(Step::Keep)
    ));
}
