/** The notices' types live in the domain (the workflows hand notices on); here for the delivery layer's imports. */
export * from '../domain/notices';
