//! `GET /v1/loans/{accountId}` and `GET /v1/loans/{accountId}/allocations`: an account's loan
//! and its stored allocations. Apart from the payment routes: plain reads by account id, with
//! no caller scope and no idempotency record.

use lambda_http::{Body, Response};
use servicing_domain::AccountId;

use crate::answers::{json_response, store_problem, unknown_account};
use crate::{FieldError, PaymentsApi, Problem, responses};

impl PaymentsApi {
    pub(crate) async fn get_loan(&self, account: &str) -> Result<Response<Body>, Problem> {
        let id = parse_account(account)?;
        let loan = self.store.loan_state(&id).await.map_err(store_problem)?;
        // A loan item without an account only holds facts parked before its opening.
        let Some((a, version)) = loan.and_then(|l| Some((l.account?, l.version))) else {
            return Err(unknown_account(&id));
        };
        let body = serde_json::to_string(&responses::LoanView::new(&a, version))
            .expect("plain data serializes");
        Ok(json_response(200, &body, false))
    }

    pub(crate) async fn get_allocations(&self, account: &str) -> Result<Response<Body>, Problem> {
        let id = parse_account(account)?;
        if self
            .store
            .loan_state(&id)
            .await
            .map_err(store_problem)?
            .and_then(|l| l.account)
            .is_none()
        {
            return Err(unknown_account(&id));
        }
        let allocations = self
            .store
            .allocations(&id)
            .await
            .map_err(store_problem)?
            .into_iter()
            .map(responses::AllocationView::from)
            .collect();
        let body = serde_json::to_string(&responses::AllocationsView {
            account_id: id,
            allocations,
        })
        .expect("plain data serializes");
        Ok(json_response(200, &body, false))
    }
}

fn parse_account(raw: &str) -> Result<AccountId, Problem> {
    AccountId::parse(raw).map_err(|e| {
        Problem::validation(vec![FieldError {
            field: "accountId",
            rule: e.0,
        }])
    })
}
