// Every accepted form of #[fenced::locked] compiles.
use fenced::{Client, Error, Lease};

#[derive(Debug)]
enum AppError {
    Lock(Error),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Lock(e)
    }
}

struct Orders {
    client: Client,
}

impl Orders {
    // A method; the client comes from `self`; ttl and wait given.
    #[fenced::locked(client = self.client, name = "order:{id}", ttl = "10s", wait = "500ms")]
    async fn pay(&self, id: u64) -> Result<u64, AppError> {
        Ok(id)
    }

    // The lease as a parameter, anywhere in the list; a borrowed argument in the name.
    #[fenced::locked(client = &self.client, name = "user:{user}:order:{id}")]
    async fn refund(&self, #[lease] lease: Lease, user: &str, id: u64) -> fenced::Result<u64> {
        let _ = (user, id);
        Ok(lease.fencing_token().get())
    }
}

// A free function with the client as an argument, minutes and hours.
#[fenced::locked(client = client, name = "nightly", ttl = "5m", wait = "1h")]
pub async fn nightly(client: &Client) -> Result<(), Error> {
    Ok(())
}

fn main() {
    let _ = Orders::pay;
    let _ = Orders::refund;
    let _ = nightly;
    let _ = AppError::Lock;
}
