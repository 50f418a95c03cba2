//! Unit tests of the money reconciliation's pure parts: the settlement file and minor units.

use super::*;

#[test]
fn when_a_settlement_file_is_read_should_take_totals_in_minor_units() {
    let parsed = parse_settlement("source,date,currency,total\nprov-a,2026-11-02,EUR,10000.00\n")
        .expect("parsed");
    assert_eq!(parsed.len(), 1);
    assert_eq!(parsed[0].total_minor, 1_000_000);
    assert!(
        parse_settlement("prov-a,2026-11-02,EUR,10.5").is_err(),
        "two decimals"
    );
    assert!(parse_settlement("prov-a,2026-11-02,EUR").is_err());
    assert_eq!(minor(-25_050), "-250.50");
}
