//! TLS (`settle serve --ssl-cert-file --ssl-key-file`): psql 15 with `sslmode=require` gets an
//! encrypted connection and SCRAM over it; a plain client is still served; without the files,
//! `sslmode=require` is refused. The certificate is made here (rcgen, self-signed). Skipped,
//! saying why, without psql.

mod common;

use common::{require, run, text, TestServer};

fn psql_conn(psql: &std::path::Path, conninfo: &str, sql: &str) -> std::process::Output {
    run(psql, &["-X", "-At", "-d", conninfo, "-c", sql])
}

#[test]
fn psql_connects_over_tls_and_scram_works_over_it() {
    let Some(psql) = require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let (cert_file, key_file) = (dir.path().join("server.crt"), dir.path().join("server.key"));
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.key_pair.serialize_pem()).unwrap();
    let data = dir.path().join("data");
    let server = TestServer::start_with_tls(&data, Some("s3cret"), &cert_file, &key_file);
    let base = format!("host=127.0.0.1 port={} user=postgres dbname=postgres password=s3cret", server.port());

    let o = psql_conn(&psql, &format!("{base} sslmode=require"), "\\conninfo");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("SSL connection (protocol: TLSv1."), "{out}");
    // The client checks the certificate against the one we made (verify-ca).
    let o = psql_conn(&psql, &format!("{base} sslmode=verify-ca sslrootcert={}", cert_file.display()), "SELECT 40 + 2");
    assert_eq!(text(&o).0.trim(), "42", "{}", text(&o).1);
    // A wrong password is still refused over TLS.
    let o = psql_conn(
        &psql,
        &format!("host=127.0.0.1 port={} user=postgres password=wrong sslmode=require", server.port()),
        "SELECT 1",
    );
    assert!(
        !o.status.success() && text(&o).1.contains("password authentication failed for user \"postgres\""),
        "{}",
        text(&o).1
    );
    // A client that does not ask for TLS is served in plain text.
    let o = psql_conn(&psql, &format!("{base} sslmode=disable"), "\\conninfo");
    assert!(o.status.success() && !text(&o).0.contains("SSL connection"), "{}", text(&o).0);
    drop(server);

    // Without the files, sslmode=require is refused and prefer falls back to plain text.
    let plain = TestServer::start_with_password(&data, Some("s3cret"));
    let base = format!("host=127.0.0.1 port={} user=postgres dbname=postgres password=s3cret", plain.port());
    let o = psql_conn(&psql, &format!("{base} sslmode=require"), "SELECT 1");
    assert!(!o.status.success() && text(&o).1.contains("does not support SSL"), "{}", text(&o).1);
    let o = psql_conn(&psql, &format!("{base} sslmode=prefer"), "SELECT 1");
    assert_eq!(text(&o).0.trim(), "1", "{}", text(&o).1);
}
